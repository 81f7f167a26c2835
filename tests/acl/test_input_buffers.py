"""A frame written once (issue 30 §3): the acl session hands out its input memory as arrays.

On a shared-memory SoC (ACL_DEVICE) ``input_buffers`` gives arrays over memory the model itself
reads: a run on them executes on exactly those addresses (the stand-in records what each
``execute`` read), with no acl.rt.memcpy and no other buffer involved; several sets live side by
side (one frame is written while another runs); the memory may come from the caller (DVPP's
allocator). On a host with a card they are host arrays and the documented HOST_TO_DEVICE copy
stays.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import onnx
import pytest
from acl_standin import AclStandIn, FakeOm, FakeTensor

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
from edgefuse.errors import EdgefuseError, InputError
from edgefuse.manifest import read_manifest, write_manifest
from edgefuse.session import InputBuffers
from edgefuse.vision.model.adapter import prepare_frame
from edgefuse.vision.segment.segmenter import Segmenter
from tests.acl.test_session import INITIALISED, _open, _x, batch_om, static_om
from tests.needs import optional
from tests.vision.models import red_mask_model

pytestmark = [pytest.mark.standin, pytest.mark.ort]

H2D, D2H = ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST


@pytest.fixture
def board(monkeypatch):
    """The stand-in in ACL_DEVICE run mode: the 310B, host and device one memory."""
    fake = AclStandIn(run_mode=ACL_DEVICE)
    monkeypatch.setitem(sys.modules, "acl", fake)
    yield fake
    assert RUNTIME.users == 0, "a test left an AclSession open"
    RUNTIME.shutdown()


def _copies(fake: AclStandIn, before: dict[int, int]) -> dict[int, int]:
    return {kind: n - before.get(kind, 0) for kind, n in fake.memcpy_counts.items()
            if n - before.get(kind, 0)}


def test_on_the_board_a_run_reads_the_buffers_the_frame_was_written_into(board, tmp_path):
    with _open(board, tmp_path, static_om()) as session:
        buffers = session.input_buffers()
        assert isinstance(buffers, InputBuffers) and buffers.owned_by(session)
        address = buffers.device_addresses["x"]
        assert buffers["x"].shape == (1, 3, 4, 4) and buffers["x"].dtype == np.float32
        assert buffers["x"].ctypes.data == address and buffers["x"].flags.writeable
        before = dict(board.memcpy_counts)
        outputs = []
        for frame in range(3):
            np.copyto(buffers["x"], _x() + frame)
            outputs.append(session.run(buffers))
        assert _copies(board, before) == {}
        assert board.executed_inputs[-3:] == [(address,)] * 3
        for frame, out in enumerate(outputs):
            np.testing.assert_array_equal(out["y"], (_x() + frame) * 2)
            np.testing.assert_array_equal(out["s"], [[(_x() + frame).sum()]])
        # A plain feed dict still runs, on the session's own buffer (one CPU write, no memcpy).
        plain = session.run({"x": _x() + 7})
        assert board.executed_inputs[-1] != (address,) and _copies(board, before) == {}
        np.testing.assert_array_equal(plain["y"], (_x() + 7) * 2)
    assert board.violations == [] and board.outstanding() == INITIALISED


def test_sets_are_independent_so_one_frame_is_written_while_another_runs(board, tmp_path):
    with _open(board, tmp_path, static_om()) as session:
        first, second = session.input_buffers(), session.input_buffers()
        assert first.device_addresses["x"] != second.device_addresses["x"]
        np.copyto(first["x"], _x())
        np.copyto(second["x"], _x() + 100)
        a = session.run(first)
        b = session.run(second)
        again = session.run(first)
    np.testing.assert_array_equal(a["y"], _x() * 2)
    np.testing.assert_array_equal(b["y"], (_x() + 100) * 2)
    np.testing.assert_array_equal(again["y"], a["y"])
    assert board.calls.count("acl.mdl.create_dataset") == 2 + 2  # own in + out, one per set
    assert board.calls.count("acl.rt.free_host") == board.calls.count("acl.rt.malloc_host")
    assert board.violations == [] and board.outstanding() == INITIALISED


def test_a_gear_model_takes_the_gear_shape_and_zeroes_the_spare_rows_of_its_set(board,
                                                                                 tmp_path):
    with _open(board, tmp_path, batch_om(), execute="async") as session:
        with pytest.raises(InputError, match=r"'x' is float32\[\?,3\], its size is only known "
                                             r"per run(.|\n)*shapes=\{'x'"):
            session.input_buffers()
        with pytest.raises(InputError, match=r"shape \[3, 4\] does not fit input x"):
            session.input_buffers({"x": (3, 4)})
        allocations = board.calls.count("acl.rt.malloc_host")
        with pytest.raises(InputError, match=r"x \[9, 3\] is 108 bytes, the OM's buffer holds 96"):
            session.input_buffers({"x": (9, 3)})  # past the largest gear: refused, none made
        assert board.calls.count("acl.rt.malloc_host") == allocations
        buffers = session.input_buffers({"x": (3, 3)})
        np.copyto(buffers["x"], _x((3, 3)))
        out = session.run(buffers)["y"]
        memsets = board.calls.count("acl.rt.memset")
        out_again = session.run(buffers)["y"]
    np.testing.assert_array_equal(out, _x((3, 3)) + 1)
    np.testing.assert_array_equal(out_again, out)
    assert memsets == 1 and board.calls.count("acl.rt.memset") == 1  # spare rows: zeroed once
    assert board.violations == [] and board.outstanding() == INITIALISED


class CallerMemory:
    """A caller's allocator (as DVPP's acl.himpi.dvpp_malloc would be), over the stand-in's device
    memory; records what it handed out and got back."""

    def __init__(self, acl: AclStandIn) -> None:
        self.acl, self.given, self.freed = acl, [], []

    def malloc(self, size: int) -> int:
        address, ret = self.acl.rt.malloc(size, 0)
        if ret:
            raise AclError("acl.rt.malloc", ret)
        self.given.append(address)
        return address

    def free(self, address: int) -> None:
        self.freed.append(address)
        if self.acl.rt.free(address):
            raise AclError("acl.rt.free", 1)


def test_the_model_input_can_live_in_the_callers_memory(board, tmp_path):
    """What the board's DVPP source does: VPC's output picture is the model input."""
    memory = CallerMemory(board)
    with _open(board, tmp_path, static_om()) as session:
        buffers = session.input_buffers(memory=memory)
        assert list(buffers.device_addresses.values()) == memory.given
        np.copyto(buffers["x"], _x() + 3)  # here the CPU; on the board VPC writes it
        before = dict(board.memcpy_counts)
        out = session.run(buffers)
        assert _copies(board, before) == {}
        assert board.executed_inputs[-1] == tuple(memory.given)
        assert memory.freed == []
    np.testing.assert_array_equal(out["y"], (_x() + 3) * 2)
    assert memory.freed == memory.given  # released with the session, once
    assert board.violations == [] and board.outstanding() == INITIALISED


def test_on_a_host_with_a_card_the_buffers_are_host_arrays_copied_once_per_run(standin,
                                                                              tmp_path):
    assert standin.run_mode == ACL_HOST
    with _open(standin, tmp_path, static_om()) as session:
        buffers = session.input_buffers()
        assert buffers.device_addresses is None
        with pytest.raises(InputError, match="only a SoC whose host and device share memory "
                                             "has.*ACL_HOST"):
            session.input_buffers(memory=CallerMemory(standin))
        before = dict(standin.memcpy_counts)
        for frame in range(3):
            np.copyto(buffers["x"], _x() + frame)
            out = session.run(buffers)
        np.testing.assert_array_equal(out["y"], (_x() + 2) * 2)
        assert _copies(standin, before) == {H2D: 3, D2H: 3 * 2}
    assert standin.violations == [] and standin.outstanding() == INITIALISED


def test_a_closed_session_hands_out_no_buffers(board, tmp_path):
    session = _open(board, tmp_path, static_om())
    session.close()
    with pytest.raises(EdgefuseError, match="session is closed"):
        session.input_buffers()


def test_a_failed_allocation_leaves_nothing_behind_after_close(board, tmp_path):
    session = _open(board, tmp_path, static_om())
    board.fail_api("acl.rt.malloc_host", occurrence=4)  # 3 at open; the set's first fails
    with pytest.raises(AclError, match="acl.rt.malloc_host"):
        session.input_buffers()
    np.testing.assert_array_equal(session.run({"x": _x()})["y"], _x() * 2)
    session.close()
    assert board.outstanding() == INITIALISED


def test_a_vision_model_on_the_board_writes_each_frame_where_the_npu_reads_it(board, tmp_path,
                                                                             monkeypatch):
    """Frames through a Segmenter on a YUV420SP AIPP build in ACL_DEVICE mode: every execute
    reads a set of the session's input buffers, holding exactly the NV12 bytes of the plain
    path, with no acl.rt.memcpy."""
    optional("cv2")
    monkeypatch.setenv("PATH", "")  # no atc: compile writes the build, the OM is registered below
    onnx.save(red_mask_model(32), tmp_path / "mask.onnx")
    build = tmp_path / "build"
    compile_model(tmp_path / "mask.onnx", "Ascend310B4", build,
                  aipp=AippSpec(input_format="YUV420SP", source_size=(32, 32),
                                scale=(1 / 255,) * 3))
    seen = []
    om = FakeOm(inputs=[FakeTensor("images", (1, 32, 32, 3), np.dtype(np.uint8),
                                   aipp_format="YUV420SP_U8")],
                outputs=[FakeTensor("output0", (1, 1, 32, 32), np.dtype(np.float32))],
                compute=lambda f: seen.append(f["images"].copy()) or [
                    np.zeros((1, 1, 32, 32), np.float32)])
    board.register_model(build / "model.om", om)
    write_manifest(build, dataclasses.replace(read_manifest(build, check_files=False),
                                              om="model.om"))
    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(4)]
    with Segmenter.open(build, backends="acl") as segmenter:
        assert segmenter.session.backend == "acl" and segmenter.session.in_place
        before, executed = dict(board.memcpy_counts), len(board.executed_inputs)
        addresses = set()
        for frame in frames:
            feeds, geometry = segmenter.preprocess(frame)
            addresses.add(feeds.device_addresses["images"])
            segmenter.postprocess(segmenter.infer(feeds), geometry)
            del feeds
        assert _copies(board, before) == {}
        read = {inputs[0] for inputs in board.executed_inputs[executed:]}
        assert read == addresses and len(addresses) == 1  # one set, reused frame after frame
        expected = [prepare_frame(segmenter.plan, frame)[0]["images"] for frame in frames]
    for got, want in zip(seen[-4:], expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert board.violations == [] and board.outstanding() == INITIALISED
