"""open_session: ordered backends, every skip recorded with its reason and logged once, strict
mode, and the sources it accepts (BUILD_DIR, .onnx, .om, ModelProto)."""

from __future__ import annotations

import logging
import sys
import types

import numpy as np
import onnxruntime as ort
import pytest

from edgefuse import open_session, runtime
from edgefuse.errors import BackendUnavailableError, InputError
from edgefuse.manifest import BuildManifest, TensorEntry, write_manifest
from tests.model_builders import aipp_build, conv_net, save

pytestmark = [pytest.mark.standin, pytest.mark.ort]


@pytest.fixture(autouse=True)
def cpu_only_onnxruntime(monkeypatch):
    """These tests describe a machine without CUDA, also when they run on one."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])


@pytest.fixture
def onnx_path(tmp_path):
    return save(conv_net(), tmp_path / "conv.onnx")


def _build_dir(tmp_path, *, om: bool, soc: str | None = "Ascend310B4"):
    build = tmp_path / "build"
    build.mkdir()
    save(conv_net(), build / "model.onnx")
    if om:
        (build / "model.om").write_bytes(b"om")
    manifest = BuildManifest(
        model="model.onnx", om="model.om" if om else None, soc=soc, cann_version=None,
        edgefuse_version="0.1.0",
        inputs=(TensorEntry("x", (1, 3, 8, 8), "float32", "NCHW"),),
        outputs=(TensorEntry("logits", (1, 5), "float32"),
                 TensorEntry("features", (1, 4), "float32")),
    )
    write_manifest(build, manifest)
    return build


def test_laptop_falls_back_to_cpu_and_says_why(onnx_path, no_acl, caplog):
    with caplog.at_level(logging.DEBUG, logger="edgefuse.runtime"):
        with open_session(onnx_path) as session:
            assert session.backend == "cpu"
            assert list(session.skipped) == ["acl", "cuda"]
            assert "pyACL (module 'acl') is not importable" in session.skipped["acl"]
            assert "has no CUDAExecutionProvider" in session.skipped["cuda"]
            out = session.run({"x": np.zeros((1, 3, 8, 8), np.float32)})
    assert out["logits"].shape == (1, 5)
    records = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(records) == 1
    message = records[0].getMessage()
    assert message == (f"{onnx_path}: running on 'cpu'; acl, cuda not available here "
                       "(`edgefuse doctor` says why)")  # one line; the reasons at DEBUG
    reasons = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("skipped acl: pyACL" in r for r in reasons)


def test_the_same_fallback_is_logged_once_per_process(onnx_path, no_acl, caplog):
    with caplog.at_level(logging.WARNING, logger="edgefuse.runtime"):
        for _ in range(3):
            open_session(onnx_path).close()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_strict_lists_every_reason_instead_of_falling_back(onnx_path, no_acl):
    with pytest.raises(BackendUnavailableError, match=r"no backend in \(acl, cuda\)") as caught:
        open_session(onnx_path, backends=("acl", "cuda"), strict=True)
    assert "acl: pyACL" in caught.value.context
    assert "cuda: onnxruntime" in caught.value.context


def test_a_single_named_backend_is_strict(onnx_path):
    with pytest.raises(BackendUnavailableError, match=r"no backend in \(cuda\)"):
        open_session(onnx_path, backends="cuda")


def test_non_strict_list_ends_on_the_cpu(onnx_path, no_acl):
    with open_session(onnx_path, backends=("acl", "cuda")) as session:
        assert session.backend == "cpu"
        assert set(session.skipped) == {"acl", "cuda"}


def test_explicit_cpu_records_nothing(onnx_path):
    with open_session(onnx_path, backends="cpu") as session:
        assert session.backend == "cpu" and session.skipped == {}


def test_unknown_backend_and_option_are_input_errors(onnx_path):
    with pytest.raises(InputError, match=r"unknown backend\(s\): 'gpu'"):
        open_session(onnx_path, backends=("gpu", "cpu"))
    with pytest.raises(InputError, match=r"unknown session option\(s\): thread"):
        open_session(onnx_path, backends="cpu", thread=2)


def test_options_reach_the_backend(onnx_path):
    with open_session(onnx_path, backends="cpu", threads=1, validate=False) as session:
        assert not session.validate
        assert session.ort_session.get_session_options().intra_op_num_threads == 1


def test_build_without_om_skips_acl_with_a_reason(tmp_path, standin):
    with open_session(_build_dir(tmp_path, om=False)) as session:
        assert session.backend == "cpu"
        assert "the build has no OM" in session.skipped["acl"]
        assert "--soc Ascend310B4" in session.skipped["acl"]


def test_om_for_another_soc_is_skipped(tmp_path, standin):
    with open_session(_build_dir(tmp_path, om=True, soc="Ascend310P3")) as session:
        assert session.backend == "cpu"
        assert session.skipped["acl"] == ("the OM was compiled for Ascend310P3, this device "
                                          "is Ascend310B4")


def test_a_foreign_module_named_acl_is_not_taken_for_pyacl(onnx_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "acl", types.ModuleType("acl"))
    assert "is not pyACL" in runtime.probe("acl", onnx_path).reason


def test_pyacl_without_a_device_is_a_reason(onnx_path, standin):
    standin.soc = None
    assert "sees no Ascend device" in runtime.probe("acl", onnx_path).reason


def test_an_om_alone_cannot_run_on_the_host(tmp_path, no_acl):
    om = tmp_path / "model.om"
    om.write_bytes(b"om")
    found = runtime.probe("cpu", om)
    assert not found.ok and "is an OM only" in found.reason
    with pytest.raises(BackendUnavailableError) as caught:
        open_session(om)
    assert "cpu:" in caught.value.context and "acl:" in caught.value.context


def test_in_memory_model_runs(no_acl):
    with open_session(conv_net(), backends="cpu") as session:
        assert session.run({"x": np.ones((1, 3, 8, 8), np.float32)})["features"].shape == (1, 4)


def test_missing_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        open_session(tmp_path / "nope.onnx")


def test_probe_without_a_model_describes_the_machine(no_acl):
    assert runtime.probe("cpu").ok
    assert not runtime.probe("acl").ok


def test_host_session_of_an_aipp_build_takes_the_boards_frames(tmp_path):
    build, spec = aipp_build(tmp_path)
    frame = np.random.default_rng(0).integers(0, 256, (1, 12, 10, 3), dtype=np.uint8)
    with open_session(build, backends="cpu") as session:
        assert [s.describe() for s in session.inputs] == ["x: uint8[1,12,10,3]"]
        got = session.run({"x": frame})
        with pytest.raises(InputError, match=r"expects uint8\[1,12,10,3\], got float32"):
            session.run({"x": np.zeros((1, 3, 8, 8), np.float32)})
    raw = ort.InferenceSession(str(build / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = raw.run(None, {"x": spec.emulate(frame[0])})
    assert got["logits"].tobytes() == expected[0].tobytes()
