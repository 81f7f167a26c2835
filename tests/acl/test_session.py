"""The acl backend's contract with pyACL, checked against the strict stand-in (tests/fakes):
documented call order, buffers allocated once, every dtype, run modes, gears, threads, failure
injection at every call, and no growth in live allocations over 10,000 runs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from acl_standin import AclStandIn, FakeOm, FakeTensor

from edgefuse import open_session
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.resources import RUNTIME
from edgefuse.acl.return_codes import (
    ACL_DEVICE,
    ACL_HOST,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    AclError,
)
from edgefuse.acl.session import AclSession
from edgefuse.errors import BackendUnavailableError, InputError, ModelLoadError
from edgefuse.manifest import BuildManifest, TensorEntry, read_manifest, write_manifest
from tests.model_builders import aipp_build, conv_net, save

pytestmark = [pytest.mark.standin, pytest.mark.ort]

F32, F16, U8 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint8)


def static_om() -> FakeOm:
    """One input, two outputs; ATC-style output names."""
    return FakeOm(
        inputs=[FakeTensor("x", (1, 3, 4, 4), F32)],
        outputs=[FakeTensor("y", (1, 3, 4, 4), F32), FakeTensor("s", (1, 1), F32)],
        compute=lambda f: [f["x"] * 2, f["x"].sum(axis=(1, 2, 3)).reshape(1, 1)],
        output_names=["Mul_0:0:y", "ReduceSum_1:0:s"],
    )


def batch_om() -> FakeOm:
    return FakeOm(
        inputs=[FakeTensor("x", (-1, 3), F32, max_dims=(8, 3))],
        outputs=[FakeTensor("y", (-1, 3), F32, max_dims=(8, 3))],
        compute=lambda f: [f["x"] + 1],
        batch_gears=(1, 2, 4, 8),
    )


def hw_om() -> FakeOm:
    return FakeOm(
        inputs=[FakeTensor("x", (1, 1, -1, -1), F32, max_dims=(1, 1, 8, 8))],
        outputs=[FakeTensor("y", (1, 1, -1, -1), F32, max_dims=(1, 1, 8, 8))],
        compute=lambda f: [f["x"] * 3],
        hw_gears=((4, 4), (8, 8)),
    )


def dims_om() -> FakeOm:
    return FakeOm(
        inputs=[FakeTensor("a", (1, -1), F32, max_dims=(1, 4)),
                FakeTensor("b", (-1, 2), F32, max_dims=(4, 2))],
        outputs=[FakeTensor("y", (1, 2), F32)],
        compute=lambda f: [f["a"] @ f["b"]],
        dims_gears=((1, 2, 2, 2), (1, 4, 4, 2)),
    )


def _x(shape=(1, 3, 4, 4)) -> np.ndarray:
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


def _open(standin, tmp_path, om, **options) -> AclSession:
    return AclSession(standin.register_model(tmp_path / "model.om", om), **options)


def _manifest(**overrides) -> BuildManifest:
    fields = dict(model="model.onnx", om="model.om", soc="Ascend310B4", edgefuse_version="0.1.0",
                  inputs=(TensorEntry("x", (1, 3, 4, 4), "float32", "NCHW"),),
                  outputs=(TensorEntry("y", (1, 3, 4, 4), "float32"),
                           TensorEntry("s", (1, 1), "float32")))
    fields.update(overrides)
    return BuildManifest(**fields)


# --- the documented sequence -------------------------------------------------------------------

OPEN_SEQUENCE = [
    "acl.init", "acl.get_soc_name", "acl.rt.set_device", "acl.rt.create_context",
    "acl.rt.create_stream", "acl.rt.get_run_mode", "acl.mdl.create_desc",
    "acl.mdl.load_from_file", "acl.mdl.get_desc",
    "acl.mdl.get_num_inputs", "acl.mdl.get_input_dims_v2", "acl.mdl.get_input_data_type",
    "acl.mdl.get_input_size_by_index",
    "acl.mdl.get_num_outputs",
    *["acl.mdl.get_output_dims", "acl.mdl.get_output_data_type",
      "acl.mdl.get_output_size_by_index"] * 2,
    "acl.mdl.create_dataset",
    "acl.rt.malloc", "acl.create_data_buffer", "acl.mdl.add_dataset_buffer",
    "acl.mdl.create_dataset",
    *["acl.rt.malloc", "acl.create_data_buffer", "acl.mdl.add_dataset_buffer"] * 2,
]
RUN_SEQUENCE = ["acl.rt.memcpy", "acl.mdl.execute", "acl.rt.memcpy", "acl.rt.memcpy"]
CLOSE_SEQUENCE = [
    *["acl.destroy_data_buffer", "acl.rt.free"] * 2, "acl.mdl.destroy_dataset",
    "acl.destroy_data_buffer", "acl.rt.free", "acl.mdl.destroy_dataset",
    "acl.mdl.unload", "acl.mdl.destroy_desc", "acl.rt.destroy_stream",
    "acl.rt.destroy_context", "acl.rt.reset_device",
]
# What a closed session leaves: pyACL initialised, until the process exits (``RUNTIME.shutdown``,
# the exit hook; the ``standin`` fixture runs it after each test).
INITIALISED = {"initialized": 1}


def test_open_run_close_follow_the_documented_sequence(standin, tmp_path):
    session = _open(standin, tmp_path, static_om())
    assert standin.calls == OPEN_SEQUENCE
    out = session.run({"x": _x()})
    assert standin.calls[len(OPEN_SEQUENCE):] == RUN_SEQUENCE
    session.close()
    assert standin.calls[len(OPEN_SEQUENCE) + len(RUN_SEQUENCE):] == CLOSE_SEQUENCE
    np.testing.assert_array_equal(out["y"], _x() * 2)
    np.testing.assert_array_equal(out["s"], [[_x().sum()]])
    assert standin.outstanding() == INITIALISED
    RUNTIME.shutdown()  # what the interpreter's exit runs
    assert standin.calls[-1] == "acl.finalize"
    assert standin.outstanding() == {} and standin.leaks_at_finalize == {}
    assert standin.violations == []


def test_specs_use_tensor_names_and_acl_dtypes(standin, tmp_path):
    with _open(standin, tmp_path, static_om()) as session:
        assert [s.describe() for s in session.inputs] == ["x: float32[1,3,4,4]"]
        assert [s.name for s in session.outputs] == ["y", "s"]
        assert session.backend == "acl" and session.soc == "Ascend310B4"


def test_build_names_replace_renamed_om_outputs_by_position(standin, tmp_path):
    om = static_om()
    om.output_names = ["output_0", "output_1"]
    manifest = _manifest(outputs=(TensorEntry("image", (1, 3, 4, 4), "float32"),
                                  TensorEntry("total", (1, 1), "float32")))
    path = standin.register_model(tmp_path / "model.om", om)
    with AclSession(path, manifest=manifest) as session:
        assert set(session.run({"x": _x()})) == {"image", "total"}


def test_open_session_on_a_build_dir_picks_acl(standin, tmp_path):
    save(conv_net(), tmp_path / "model.onnx")
    standin.register_model(tmp_path / "model.om", static_om())
    write_manifest(tmp_path, _manifest())
    with open_session(tmp_path) as session:
        assert session.backend == "acl" and session.skipped == {}
        np.testing.assert_array_equal(session.run({"x": _x()})["y"], _x() * 2)


def test_an_aipp_build_takes_the_same_frames_on_the_board_and_the_host(standin, tmp_path):
    build, _ = aipp_build(tmp_path, om=True)
    om = FakeOm(inputs=[FakeTensor("x", (1, 12, 10, 3), U8)],
                outputs=[FakeTensor("logits", (1, 5), F32), FakeTensor("features", (1, 4), F32)],
                compute=lambda f: [np.zeros((1, 5)), np.zeros((1, 4))])
    standin.register_model(build / "model.om", om)
    write_manifest(build, read_manifest(build, check_files=False))  # the OM's digest
    frame = np.zeros((1, 12, 10, 3), np.uint8)
    with open_session(build) as board, open_session(build, backends="cpu") as host:
        assert board.backend == "acl" and host.backend == "cpu"
        assert board.inputs == host.inputs
        assert board.run({"x": frame}).keys() == host.run({"x": frame}).keys()


def test_an_nv12_frame_has_one_shape_on_the_board_the_host_and_in_the_manifest(
        standin, tmp_path, monkeypatch):
    """pyACL's get_input_dims says N,H,W,C for an input behind YUV420SP AIPP, while the buffer
    holds N*1.5H*W bytes: the session reads get_input_dims_v2, so a real NV12 frame is accepted
    and one of the wrong size is refused before it overflows the device buffer."""
    monkeypatch.setenv("PATH", "")  # no atc: compile writes the build, the OM is registered below
    spec = AippSpec.from_dict({"input_format": "YUV420SP", "source_size": [8, 8], "scale": 0.01})
    build = tmp_path / "nv12"
    compile_model(save(conv_net(), tmp_path / "net.onnx"), "Ascend310B4", build, aipp=spec)
    seen = {}
    om = FakeOm(inputs=[FakeTensor("x", (1, 8, 8, 3), U8, aipp_format="YUV420SP_U8")],
                outputs=[FakeTensor("logits", (1, 5), F32), FakeTensor("features", (1, 4), F32)],
                compute=lambda f: seen.update(f) or [np.zeros((1, 5)), np.zeros((1, 4))])
    standin.register_model(build / "model.om", om)
    manifest = read_manifest(build, check_files=False)
    write_manifest(build, dataclasses.replace(manifest, om="model.om"))
    frame_shape = (1, 12, 8)  # (N, 1.5 * 8, 8): the NV12 bytes
    assert read_manifest(build).inputs[0].shape == frame_shape
    frame = np.random.default_rng(0).integers(0, 256, frame_shape, dtype=np.uint8)
    with open_session(build) as board, open_session(build, backends="cpu") as host:
        assert board.backend == "acl"
        assert board.inputs[0].shape == host.inputs[0].shape == frame_shape
        board.run({"x": frame})
        host.run({"x": frame})
        np.testing.assert_array_equal(seen["x"], frame)
        with pytest.raises(InputError, match=r"input 'x' expects uint8\[1,12,8\], got "
                                             r"uint8\[1,8,8,3\]"):
            board.run({"x": np.zeros((1, 8, 8, 3), np.uint8)})


def test_a_plain_single_channel_uint8_input_keeps_its_shape_on_the_board(standin, tmp_path):
    """get_input_dims_v2 reports (N, H, W, 1) for a uint8 input without AIPP too; only the input
    the manifest marks as YUV420SP loses its trailing 1, so board, manifest and sim agree."""
    om = FakeOm(inputs=[FakeTensor("x", (1, 4, 4, 1), U8)],
                outputs=[FakeTensor("y", (1, 4, 4, 1), F32)],
                compute=lambda f: [f["x"].astype(np.float32)])
    manifest = _manifest(inputs=(TensorEntry("x", (1, 4, 4, 1), "uint8", "NHWC"),),
                         outputs=(TensorEntry("y", (1, 4, 4, 1), "float32"),))
    path = standin.register_model(tmp_path / "model.om", om)
    frame = np.arange(16, dtype=np.uint8).reshape(1, 4, 4, 1)
    with AclSession(path, manifest=manifest) as session:
        assert session.inputs[0].shape == manifest.inputs[0].shape == (1, 4, 4, 1)
        np.testing.assert_array_equal(session.run({"x": frame})["y"], frame)


def test_fp16_and_uint8_io(standin, tmp_path):
    om = FakeOm(inputs=[FakeTensor("frame", (1, 4, 4, 3), U8)],
                outputs=[FakeTensor("y", (1, 4, 4, 3), F16)],
                compute=lambda f: [(f["frame"] / 255).astype(np.float16)])
    frame = np.arange(48, dtype=np.uint8).reshape(1, 4, 4, 3)
    with _open(standin, tmp_path, om) as session:
        assert session.inputs[0].dtype == U8 and session.outputs[0].dtype == F16
        out = session.run({"frame": frame})["y"]
    assert out.dtype == F16
    np.testing.assert_array_equal(out, (frame / 255).astype(np.float16))


def test_a_dtype_numpy_cannot_hold_is_refused_and_everything_released(standin, tmp_path):
    om = static_om()
    om.outputs = [FakeTensor("y", (1, 3, 4, 4), F16, acl_type=27), om.outputs[1]]
    with pytest.raises(ModelLoadError, match="output 'y' of the OM is ACL_BF16"):
        _open(standin, tmp_path, om)
    assert standin.outstanding() == INITIALISED




H2D, D2H = ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST


def _frames_through(run_mode: int, tmp_path, monkeypatch, om, feeds, execute="sync"):
    """Open ``om`` in ``run_mode``, run every feed; the outputs, the acl.rt.memcpy calls by kind
    during the runs, and the stand-in (closed session, pyACL finalized)."""
    fake = AclStandIn(run_mode=run_mode)
    monkeypatch.setitem(sys.modules, "acl", fake)
    try:
        with _open(fake, tmp_path, om, execute=execute) as session:
            assert session.run_mode == run_mode
            opened = dict(fake.memcpy_counts)
            outputs = [session.run(feed) for feed in feeds]
            copies = {kind: n - opened.get(kind, 0) for kind, n in fake.memcpy_counts.items()}
        assert fake.violations == [] and fake.outstanding() == INITIALISED
    finally:
        RUNTIME.shutdown()  # the next test must not inherit this stand-in as pyACL
    return outputs, {kind: n for kind, n in copies.items() if n}, fake


def test_on_the_board_inputs_and_outputs_live_in_shared_memory_without_copies(tmp_path,
                                                                              monkeypatch):
    """Issue 30 §3: in ACL_DEVICE mode (the 310B, host and device one memory) buffers come from
    acl.rt.malloc_host once and no frame is copied; in ACL_HOST mode each frame costs the
    documented copies (one per input, one per output); the outputs are the same."""
    feeds = [{"x": _x() + frame} for frame in range(5)]
    board, board_copies, board_acl = _frames_through(ACL_DEVICE, tmp_path, monkeypatch,
                                                     static_om(), feeds)
    host, host_copies, host_acl = _frames_through(ACL_HOST, tmp_path, monkeypatch,
                                                  static_om(), feeds)
    assert board_copies == {}
    assert host_copies == {H2D: 5 * 1, D2H: 5 * 2}
    for feed, on_board, on_host in zip(feeds, board, host, strict=True):
        np.testing.assert_array_equal(on_board["y"], feed["x"] * 2)  # the model's own compute
        np.testing.assert_array_equal(on_board["s"], feed["x"].sum().reshape(1, 1))
        for name in ("y", "s"):
            np.testing.assert_array_equal(on_board[name], on_host[name])
    # Returned outputs are the caller's: the next frame does not overwrite an earlier one.
    assert not np.array_equal(board[0]["y"], board[1]["y"])
    assert board_acl.calls.count("acl.rt.malloc_host") == 3
    assert board_acl.calls.count("acl.rt.free_host") == 3 and "acl.rt.malloc" not in board_acl.calls
    assert "acl.rt.malloc_host" not in host_acl.calls


def test_partial_batches_on_the_board_match_the_host_without_copies(tmp_path, monkeypatch):
    """A gear model, async, with batches that leave spare rows (cleared by memset, not copied)."""
    feeds = [{"x": _x((batch, 3)) + batch} for batch in (8, 3, 1, 5, 2)]
    board, board_copies, _ = _frames_through(ACL_DEVICE, tmp_path, monkeypatch, batch_om(),
                                             feeds, execute="async")
    host, host_copies, _ = _frames_through(ACL_HOST, tmp_path, monkeypatch, batch_om(), feeds,
                                           execute="async")
    assert board_copies == {} and host_copies == {H2D: 5, D2H: 5}
    for feed, on_board, on_host in zip(feeds, board, host, strict=True):
        np.testing.assert_array_equal(on_board["y"], feed["x"] + 1)
        np.testing.assert_array_equal(on_board["y"], on_host["y"])


def test_async_execution_synchronizes_before_reading(standin, tmp_path):
    with _open(standin, tmp_path, static_om(), execute="async") as session:
        start = len(standin.calls)
        np.testing.assert_array_equal(session.run({"x": _x()})["y"], _x() * 2)
        assert standin.calls[start:] == ["acl.rt.memcpy", "acl.mdl.execute_async",
                                         "acl.rt.synchronize_stream", "acl.rt.memcpy",
                                         "acl.rt.memcpy"]


def test_bad_execute_mode_is_an_input_error(standin, tmp_path):
    with pytest.raises(InputError, match="execute must be one of"):
        _open(standin, tmp_path, static_om(), execute="later")


# --- soc, CANN and shared initialisation --------------------------------------------------------

def test_om_for_another_soc_is_refused_before_loading(standin, tmp_path):
    path = standin.register_model(tmp_path / "model.om", static_om())
    with pytest.raises(BackendUnavailableError, match="compiled for Ascend310P3, this device "
                                                      "reports Ascend310B4") as error:
        AclSession(path, manifest=_manifest(soc="Ascend310P3"))
    assert "edgefuse compile MODEL --soc Ascend310B4 -o BUILD_DIR" in error.value.hint
    assert "acl.mdl.load_from_file" not in standin.calls
    assert standin.outstanding() == INITIALISED


def test_an_om_for_a_sibling_of_the_family_is_refused_with_the_rebuild(standin, tmp_path):
    """A DK A2 reports Ascend310B1 or Ascend310B4 depending on its image; CANN documents an OM
    only for the exact --soc_version, so the session refuses and says how to rebuild."""
    path = standin.register_model(tmp_path / "model.om", static_om())
    with pytest.raises(BackendUnavailableError, match="compiled for Ascend310B1, this device "
                                                      "reports Ascend310B4; .* one chip family"
                       ) as error:
        AclSession(path, manifest=_manifest(soc="Ascend310B1"))
    hint = error.value.hint
    assert "--soc Ascend310B4" in hint and "--soc_version=Ascend310B1" in hint
    assert "op package built for the family serves both" in hint
    assert "acl.mdl.load_from_file" not in standin.calls
    assert standin.outstanding() == INITIALISED


def test_another_cann_version_is_logged(standin, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("edgefuse.acl.session.cann_version", lambda: "8.0.RC1")
    path = standin.register_model(tmp_path / "model.om", static_om())
    with AclSession(path, manifest=_manifest(cann_version="7.0.0")):
        pass
    assert "compiled with CANN 7.0.0, this board runs CANN 8.0.RC1" in caplog.text


def test_pyacl_initialised_by_someone_else_is_left_to_them(standin, tmp_path):
    assert standin.init() == 0  # e.g. torch_npu initialised pyACL first
    with _open(standin, tmp_path, static_om()) as session:
        session.run({"x": _x()})
    assert standin.calls.count("acl.finalize") == 0
    assert standin.outstanding() == {"initialized": 1}
    standin.finalize()


def test_repeat_finalize_is_tolerated(standin, tmp_path):
    standin.fail_api("acl.finalize", 100037)
    _open(standin, tmp_path, static_om()).close()
    assert RUNTIME.users == 0


def test_two_sessions_share_one_init_and_switch_contexts(standin, tmp_path):
    first = AclSession(standin.register_model(tmp_path / "a.om", static_om()))
    second = AclSession(standin.register_model(tmp_path / "b.om", hw_om()))
    assert RUNTIME.users == 2 and standin.calls.count("acl.init") == 1
    for _ in range(2):  # the stand-in fails a model run under another session's context
        np.testing.assert_array_equal(first.run({"x": _x()})["y"], _x() * 2)
        np.testing.assert_array_equal(second.run({"x": _x((1, 1, 4, 4))})["y"],
                                      _x((1, 1, 4, 4)) * 3)
    first.close()
    second.close()
    assert standin.calls.count("acl.finalize") == 0 and standin.outstanding() == INITIALISED
    RUNTIME.shutdown()
    assert standin.calls.count("acl.finalize") == 1 and standin.outstanding() == {}


# --- gears ---------------------------------------------------------------------------------------

def test_batch_gear_pads_to_the_next_gear_and_cuts_back(standin, tmp_path):
    with _open(standin, tmp_path, batch_om()) as session:
        assert session.gears.kind == "batch" and session.gears.values == (1, 2, 4, 8)
        assert session.inputs[0].shape == (None, 3)
        x = _x((3, 3))
        out = session.run({"x": x})["y"]
        np.testing.assert_array_equal(out, x + 1)
        exact = session.run({"x": _x((8, 3))})["y"]
        np.testing.assert_array_equal(exact, _x((8, 3)) + 1)
        with pytest.raises(InputError, match="has no batch gear for batch 9") as caught:
            session.run({"x": _x((9, 3))})
        assert "gears: [1, 2, 4, 8]" in caught.value.context
    assert standin.violations == []


def test_a_partial_batch_runs_on_zeroed_spare_rows_whatever_ran_before(standin, tmp_path):
    """Issue 30 §4: batch 3 runs on gear 4; its fourth row is zero, not fresh device memory's
    garbage nor the rows of the batch 8 that ran before, so one feed gives one output."""
    seen = []

    def compute(feeds):
        seen.append(feeds["x"].copy())
        return [feeds["x"] + feeds["x"].sum()]  # every row depends on every row, spare included

    om = dataclasses.replace(batch_om(), compute=compute)
    with _open(standin, tmp_path, om) as session:
        x = _x((3, 3))
        first = session.run({"x": x})["y"]
        session.run({"x": _x((8, 3)) + 100})
        again = session.run({"x": x})["y"]
        memsets = standin.calls.count("acl.rt.memset")
        session.run({"x": x})
        assert standin.calls.count("acl.rt.memset") == memsets  # nothing stale left to clear
    assert [feed.shape for feed in seen] == [(4, 3), (8, 3), (4, 3), (4, 3)]
    np.testing.assert_array_equal(seen[0][3], 0)
    np.testing.assert_array_equal(seen[2][3], 0)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, x + x.sum())
    assert standin.violations == []


@pytest.mark.parametrize(("om", "feeds", "shapes"), [
    (batch_om, {"x": _x((3, 3))}, [(None, 3)]),
    (hw_om, {"x": _x((1, 1, 4, 4))}, [(1, 1, None, None)]),
    (dims_om, {"a": _x((1, 2)), "b": _x((2, 2))}, [(1, None), (None, 2)]),
], ids=["batch", "hw", "dims"])
def test_v2_dims_that_report_the_largest_gear_are_read_as_geared(standin, tmp_path, om, feeds,
                                                                 shapes):
    """Issue 30 §4: on the DK A2, get_input_dims_v2 gives a gear model's largest gear, not -1."""
    model = dataclasses.replace(om(), v2_reports_largest_gear=True)
    with _open(standin, tmp_path, model) as session:
        assert [spec.shape for spec in session.inputs] == shapes
        expected = om().compute(feeds)
        for got, want in zip(session.run(feeds).values(), expected, strict=True):
            np.testing.assert_array_equal(got, want)
    assert standin.violations == []


def test_image_size_gear_must_match_exactly(standin, tmp_path):
    with _open(standin, tmp_path, hw_om()) as session:
        for size in (4, 8):
            x = _x((1, 1, size, size))
            np.testing.assert_array_equal(session.run({"x": x})["y"], x * 3)
        with pytest.raises(InputError, match=r"no hw gear for image size \(5, 5\)"):
            session.run({"x": _x((1, 1, 5, 5))})


def test_dims_gear(standin, tmp_path):
    with _open(standin, tmp_path, dims_om()) as session:
        a, b = _x((1, 4)), _x((4, 2))
        np.testing.assert_array_equal(session.run({"a": a, "b": b})["y"], a @ b)
        with pytest.raises(InputError, match=r"no dims gear for dims \(1, 3, 3, 2\)"):
            session.run({"a": _x((1, 3)), "b": _x((3, 2))})


# --- threads ---------------------------------------------------------------------------------

def test_runs_from_many_threads_set_the_context_once_per_thread(standin, tmp_path):
    with _open(standin, tmp_path, static_om()) as session:
        errors: list[BaseException] = []

        def work(seed: int) -> None:
            try:
                for i in range(25):
                    x = _x() + seed * 100 + i
                    np.testing.assert_array_equal(session.run({"x": x})["y"], x * 2)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert standin.calls.count("acl.rt.set_context") == 4


def test_a_failed_set_context_is_an_error_not_a_crash(standin, tmp_path):
    standin.fail_api("acl.rt.set_context", 107002)
    with _open(standin, tmp_path, static_om()) as session:
        caught: list[BaseException] = []
        thread = threading.Thread(
            target=lambda: caught.append(pytest.raises(AclError, session.run, {"x": _x()})))
        thread.start()
        thread.join()
        assert "acl.rt.set_context failed with 107002" in str(caught[0].value)
        np.testing.assert_array_equal(session.run({"x": _x()})["y"], _x() * 2)
    assert standin.outstanding() == INITIALISED


# --- no leaks ---------------------------------------------------------------------------------

def test_ten_thousand_runs_allocate_nothing(standin, tmp_path):
    x = _x()
    with _open(standin, tmp_path, static_om(), validate=False) as session:
        opened_calls = len(standin.calls)
        before = (standin.outstanding(), standin.malloc_count)
        for _ in range(10_000):
            out = session.run({"x": x})
        assert (standin.outstanding(), standin.malloc_count) == before
        assert set(standin.calls[opened_calls:]) == {"acl.rt.memcpy", "acl.mdl.execute"}
        np.testing.assert_array_equal(out["y"], x * 2)
    assert standin.outstanding() == INITIALISED


def test_gear_runs_allocate_nothing_either(standin, tmp_path):
    with _open(standin, tmp_path, batch_om(), execute="async") as session:
        before = (standin.outstanding(), standin.malloc_count)
        for batch in [1, 3, 8] * 300:
            session.run({"x": _x((batch, 3))})
        assert (standin.outstanding(), standin.malloc_count) == before


def test_repeated_open_and_close_leaves_nothing(standin, tmp_path):
    path = standin.register_model(tmp_path / "model.om", batch_om())
    for _ in range(200):
        with AclSession(path) as session:
            session.run({"x": _x((2, 3))})
    assert standin.outstanding() == INITIALISED
    # issue 30 §4: older CANN allows one acl.init per process (the stand-in refuses a second)
    assert standin.calls.count("acl.init") == 1 and standin.calls.count("acl.finalize") == 0
    RUNTIME.shutdown()
    assert standin.outstanding() == {} and standin.leaks_at_finalize == {}


# --- failure injection at every call ------------------------------------------------------------

# What a failed release leaves alive (the stand-in, like pyACL, changes nothing on failure).
LEFT_BY_FAILED_RELEASE = {
    "acl.rt.free": {"memory": 1},
    "acl.rt.free_host": {"memory": 1},  # on the board malloc_host's memory is device memory
    "acl.destroy_data_buffer": {"data_buffers": 1},
    "acl.mdl.destroy_dataset": {"datasets": 1},
    "acl.mdl.unload": {"models": 1},
    "acl.mdl.destroy_desc": {"descs": 1},
    "acl.rt.destroy_stream": {"streams": 1},
    "acl.rt.destroy_context": {"contexts": 1},
    "acl.rt.reset_device": {"devices": 1},
    "acl.finalize": {"initialized": 1},
}
INJECTED = 500001


def _scenario(fake: AclStandIn, directory: Path, om: FakeOm, feeds, execute: str) -> None:
    """One process: open, run twice, close, then the interpreter's exit hook."""
    try:
        session = AclSession(fake.register_model(directory / "model.om", om), execute=execute)
        try:
            session.run(feeds)
            session.run(feeds)
        finally:
            session.close()
    finally:
        RUNTIME.shutdown()


@pytest.mark.parametrize(("om", "feeds", "execute", "run_mode"), [
    (static_om, {"x": _x()}, "sync", ACL_HOST),
    (batch_om, {"x": _x((3, 3))}, "async", ACL_HOST),
    (hw_om, {"x": _x((1, 1, 4, 4))}, "sync", ACL_HOST),
    (dims_om, {"a": _x((1, 2)), "b": _x((2, 2))}, "sync", ACL_HOST),
    (batch_om, {"x": _x((3, 3))}, "async", ACL_DEVICE),
], ids=["static-sync", "batch-gear-async", "hw-gear", "dims-gear", "board-batch-gear-async"])
def test_failure_at_every_call_raises_and_releases_everything(tmp_path, monkeypatch, om, feeds,
                                                              execute, run_mode):
    recording = AclStandIn(run_mode=run_mode)
    monkeypatch.setitem(sys.modules, "acl", recording)
    _scenario(recording, tmp_path, om(), feeds, execute)
    assert recording.violations == [] and recording.outstanding() == {}
    calls = list(recording.failable_calls)
    assert len(calls) > 40

    for index, api in enumerate(calls):
        fake = AclStandIn(run_mode=run_mode)
        fake.fail_call(index, INJECTED)
        monkeypatch.setitem(sys.modules, "acl", fake)
        try:
            _scenario(fake, tmp_path, om(), feeds, execute)
        except AclError as exc:
            assert (exc.api, exc.code) == (api, INJECTED), f"call {index}"
        except BackendUnavailableError:
            assert api == "acl.get_soc_name", f"call {index}"
        else:
            pytest.fail(f"the failure injected at call {index} ({api}) went unnoticed")
        assert fake.outstanding() == LEFT_BY_FAILED_RELEASE.get(api, {}), f"call {index} ({api})"
        assert fake.violations == [], f"call {index} ({api})"
        assert RUNTIME.users == 0


# --- the stand-in stays in the tests --------------------------------------------------------------

def test_the_standin_is_unreachable_from_the_package():
    package = Path(__file__).resolve().parents[2] / "edgefuse"
    for source in package.rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        assert "acl_standin" not in text and "tests.fakes" not in text, source
    done = subprocess.run(
        [sys.executable, "-c", "from edgefuse.runtime import probe; print(probe('acl').reason)"],
        capture_output=True, text=True, check=True, cwd=package.parent,
    )
    assert "pyACL (module 'acl') is not importable" in done.stdout
