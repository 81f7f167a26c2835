"""BUILD_DIR manifest: round trip, digests recomputed on write, every corruption named on read."""

from __future__ import annotations

import json

import pytest

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.errors import InputError
from edgefuse.manifest import (
    FORMAT,
    MANIFEST_NAME,
    AippRecord,
    BuildManifest,
    TensorEntry,
    file_sha256,
    read_manifest,
    write_manifest,
)

pytestmark = pytest.mark.unit


def _build(tmp_path, **overrides):
    (tmp_path / "model.onnx").write_bytes(b"onnx bytes")
    (tmp_path / "model.om").write_bytes(b"om bytes")
    fields = dict(
        model="model.onnx",
        om="model.om",
        soc="Ascend310B4",
        cann_version="7.0.0",
        edgefuse_version="0.1.0",
        inputs=(TensorEntry("x", (1, 3, 224, 224), "float32", "NCHW"),),
        outputs=(TensorEntry("y", ("N", 1000), "float16"),),
        preprocess=AippRecord(input="x", related_input_rank=0, spec=AippSpec.from_dict(
            {"input_format": "BGR888", "source_size": [224, 224], "scale": 0.0039215686}),
            model_input_shape=(1, 3, 224, 224)),
    )
    fields.update(overrides)
    return write_manifest(tmp_path, BuildManifest(**fields))


def test_round_trip_keeps_every_field_and_unknown_keys(tmp_path):
    written = _build(tmp_path, extra={"compile": {"argv": ["atc", "--model=x"]}})
    read = read_manifest(tmp_path)
    assert read == written
    assert read.files == {"model.onnx": file_sha256(tmp_path / "model.onnx"),
                          "model.om": file_sha256(tmp_path / "model.om")}
    assert read.extra == {"compile": {"argv": ["atc", "--model=x"]}}
    assert read.inputs[0].shape == (1, 3, 224, 224) and read.outputs[0].shape == ("N", 1000)
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["format"] == FORMAT


def test_write_recomputes_digests_instead_of_trusting_the_caller(tmp_path):
    written = _build(tmp_path, files={"model.onnx": "0" * 64})
    assert written.files["model.onnx"] == file_sha256(tmp_path / "model.onnx")


def test_missing_manifest_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="has no manifest.json"):
        read_manifest(tmp_path)


def test_corrupt_json_is_named(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(InputError, match="is not valid JSON"):
        read_manifest(tmp_path)


def test_other_format_is_refused(tmp_path):
    _build(tmp_path)
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    data["format"] = "edgefuse-build/99"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match="this edgefuse reads 'edgefuse-build/1'"):
        read_manifest(tmp_path)


def test_missing_required_key_is_named(tmp_path):
    _build(tmp_path)
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    del data["inputs"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match="'inputs' is missing"):
        read_manifest(tmp_path)


def test_modified_file_fails_the_digest_check(tmp_path):
    _build(tmp_path)
    (tmp_path / "model.om").write_bytes(b"half copied")
    with pytest.raises(InputError, match="does not match its manifest digest") as caught:
        read_manifest(tmp_path)
    assert caught.value.reference == "build-file-modified"
    assert read_manifest(tmp_path, check_files=False).om == "model.om"


def test_missing_file_is_named(tmp_path):
    _build(tmp_path)
    (tmp_path / "model.om").unlink()
    with pytest.raises(InputError, match="lists 'model.om' but it is missing"):
        read_manifest(tmp_path)


def test_paths_outside_the_build_dir_are_refused(tmp_path):
    _build(tmp_path)
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    data["files"]["../secret"] = "0" * 64
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(InputError, match="must be a path inside the build directory"):
        read_manifest(tmp_path)


def test_write_refuses_a_listed_file_that_does_not_exist(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        _build(tmp_path, om="missing.om")
