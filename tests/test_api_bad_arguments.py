"""The public functions refuse bad arguments with an edgefuse error that names them, never a bare
TypeError, KeyError or RuntimeError from deep inside."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import edgefuse
from edgefuse.benchmark import bench
from edgefuse.errors import EdgefuseError
from edgefuse.manifest import MANIFEST_NAME
from tests.model_builders import aipp_build, conv_net

pytestmark = pytest.mark.ort


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(conv_net(), path)
    return path


@pytest.mark.parametrize(("call", "match"), [
    (lambda m: edgefuse.open_session(m, "cpu", threads="two"), "threads must be an integer"),
    (lambda m: edgefuse.open_session(m, "cpu", threads=0), "threads must be at least 1"),
    (lambda m: edgefuse.open_session(m, "cpu", device_id=-1), "device_id must be at least 0"),
    (lambda m: edgefuse.open_session(m, "cpu", validate="yes"), "validate must be True or False"),
    (lambda m: edgefuse.open_session(m, "gpu"), "unknown backend"),
    (lambda m: edgefuse.open_session(m, []), "backends is empty"),
    (lambda m: edgefuse.open_session(m, "cpu", colour="red"), "unknown session option"),
    (lambda m: edgefuse.open_session(42), "must be a BUILD_DIR, an .onnx or .om path"),
    (lambda m: edgefuse.optimize(onnx.ModelProto()), "IR version 0"),
    (lambda m: edgefuse.optimize(42), "must be an ONNX file path or an onnx.ModelProto"),
    (lambda m: edgefuse.optimize(m, target="tpu"), "unknown optimize target"),
    (lambda m: edgefuse.quantize(m, keep_fp32=123), "keep_fp32 must be"),
    (lambda m: edgefuse.quantize(m, samples=0), "samples must be at least 1"),
    (lambda m: edgefuse.quantize(m, min_cosine=float("nan")), "min_cosine must be a finite"),
    (lambda m: edgefuse.quantize(m, fp16=False), r"quantize\(\) makes FP16 models only"),
    (lambda m: edgefuse.verify(m, m, samples=0), "samples must be at least 1"),
    (lambda m: edgefuse.verify(m, m, min_cosine=2), r"min_cosine must be in \[-1, 1\]"),
    (lambda m: edgefuse.verify(m, m, seed=-1), "seed must be at least 0"),
    (lambda m: edgefuse.verify(m, m, task="count"), "unknown task"),
    (lambda m: edgefuse.verify(m, m, inputs={"x": np.zeros((1, 3, 4, 4), np.float32)}),
     r"input 'x' expects float32\[1,3,8,8\]"),
    (lambda m: edgefuse.compile(m, "Ascend310B4", m.parent / "b", opset=-3),
     "opset must be at least 7"),
    (lambda m: edgefuse.compile(m, "Ascend310B4", m.parent / "b", atc_timeout=0),
     "atc_timeout must be positive"),
    (lambda m: edgefuse.compile(m, "Ascend310B4", m.parent / "b", dynamic_batch=[0]),
     "gear sizes must be positive"),
    (lambda m: edgefuse.convert(42), "cannot convert a int"),
    (lambda m: bench(m, "cpu", iterations=0), "must be positive"),
    (lambda m: edgefuse.open_session(m, "cpu").run({"x": np.array([["a"]])}),
     r"input 'x' expects float32\[1,3,8,8\], got string\[1,1\]"),
])
def test_a_bad_argument_is_an_edgefuse_error(model, call, match):
    with pytest.raises(EdgefuseError, match=match):
        call(model)


@pytest.mark.parametrize("tamper", [
    lambda data: data["preprocess"].pop("spec"),
    lambda data: data["inputs"][0].pop("name"),
    lambda data: data.update(format="edgefuse-build/99"),
    lambda data: data["preprocess"]["spec"].update(input_format="CMYK"),
])
def test_a_tampered_build_dir_is_refused_with_what_is_wrong(tmp_path, tamper):
    build, _ = aipp_build(tmp_path)
    manifest = build / MANIFEST_NAME
    data = json.loads(manifest.read_text())
    tamper(data)
    manifest.write_text(json.dumps(data))
    with pytest.raises(EdgefuseError, match="manifest.json") as error:
        edgefuse.open_session(build, "cpu")
    assert error.value.reference == "bad-build-dir"
