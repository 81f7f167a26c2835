"""The DVPP board path driven through the strict media stand-in (tests/fakes/himpi_standin.py):
documented call order, channels, strides, buffer sizes and paste offsets; geometry is checked
before each call, so a bad picture never reaches the media API."""

from __future__ import annotations

import dataclasses

import pytest
from himpi_standin import HimpiStandIn, StandInViolation

from edgefuse.acl.dvpp import board, geometry
from edgefuse.errors import InputError

pytestmark = pytest.mark.standin
SOC = "Ascend310B4"


@pytest.fixture
def media():
    himpi = HimpiStandIn()
    dvpp = board.BoardDvpp(himpi, SOC)
    yield himpi, dvpp
    dvpp.close()
    assert not himpi.initialised and not himpi.memory  # everything freed, in order


def test_letterbox_into_the_model_input(media):
    himpi, dvpp = media
    frame = dvpp.malloc(geometry.picture(1280, 720, SOC, "vdec_out"))
    model = dvpp.malloc(geometry.picture(640, 640, SOC, "vpc_out"))
    plan = dvpp.letterbox(frame, model)
    assert (plan.content, plan.offset) == ((640, 360), (0, 140))
    assert himpi.calls[-2:] == ["vpc_crop_resize_paste", "vpc_get_process_result"]


class NoCopies:
    """pyACL's rt namespace where a copy is only counted (the stand-in's media memory is
    addresses only without the pyACL stand-in)."""

    def __init__(self):
        self.copies = 0
        self.rt = self

    def get_run_mode(self):
        return 0, 0

    def memcpy(self, *args):
        self.copies += 1
        return 0


def test_decode_in_documented_order():
    himpi = HimpiStandIn()
    dvpp = board.BoardDvpp(himpi, SOC, acl=NoCopies())
    out = [dvpp.malloc(geometry.picture(1920, 1080, SOC, "vdec_out")) for _ in range(3)]
    dvpp.open_vdec(3, "h264", 1920, 1080)
    got = []
    for pts in range(3):
        dvpp.send(b"\x00\x00\x00\x01" + bytes(100), out[pts], pts)
        got.append(dvpp.receive())
    assert [g.buffer for g in got] == out and [g.pts for g in got] == [0, 1, 2]
    assert dvpp.receive() is None  # nothing more: HI_ERR_VDEC_BUF_EMPTY, not an error
    assert himpi.calls[2:] == ["dvpp_malloc"] * 3 + [
        "vdec_create_chn", "vdec_start_recv_stream", "dvpp_malloc"] + [
        "vdec_send_stream", "vdec_get_frame", "vdec_release_frame"] * 3 + ["vdec_get_frame"]
    dvpp.close()
    assert not himpi.initialised and not himpi.memory


def test_short_buffers_and_odd_pictures_never_reach_the_media_api(media):
    himpi, dvpp = media
    frame = dvpp.malloc(geometry.picture(1280, 720, SOC, "vdec_out"))
    model = dvpp.malloc(geometry.picture(640, 640, SOC, "vpc_out"))
    short = dataclasses.replace(model, size=model.size - 1)
    calls = len(himpi.calls)
    with pytest.raises(InputError, match="buffer of 614399 bytes, needs 614400"):
        dvpp.letterbox(frame, short)
    odd = dataclasses.replace(frame, picture=geometry.Picture(1279, 720, 1280, 720))
    with pytest.raises(InputError, match="must be even"):
        dvpp.letterbox(odd, model)
    dvpp.open_vdec(0, "h264", 1280, 720)
    with pytest.raises(InputError, match="needs stride"):
        dvpp.send(b"\x00\x00\x01" + bytes(10), dataclasses.replace(
            frame, picture=geometry.Picture(1280, 720, 1270, 720)))
    assert "vpc_crop_resize_paste" not in himpi.calls[calls:]
    assert "vdec_send_stream" not in himpi.calls[calls:]


def test_channels(media):
    _, dvpp = media
    with pytest.raises(InputError, match=r"outside \[0, 128\)"):
        dvpp.open_vdec(128, "h264", 640, 480)
    dvpp.open_vdec(1, "h264", 640, 480)
    with pytest.raises(InputError, match="already created"):
        dvpp.open_vdec(1, "hevc", 640, 480)


def test_the_stand_in_catches_what_a_missing_check_would_let_through(monkeypatch, media):
    """Break the board path's geometry checks: the stand-in's own reading of the rules fails."""
    himpi, dvpp = media
    monkeypatch.setattr(geometry, "check_picture", lambda *args, **kwargs: None)
    frame = dvpp.malloc(geometry.picture(1280, 720, SOC, "vdec_out"))
    model = dvpp.malloc(geometry.picture(640, 640, SOC, "vpc_out"))
    with pytest.raises(StandInViolation, match="buffer 614399 < stride_w"):
        dvpp.letterbox(frame, dataclasses.replace(model, size=model.size - 1))
    with pytest.raises(StandInViolation, match="send_stream before vdec_start_recv_stream"):
        himpi.vdec_create_chn(5, {"type": 96})
        himpi.vdec_send_stream(5, {"len": 1, "end_of_stream": False}, {}, -1)
    himpi.vdec_destroy_chn(5)


def test_an_error_code_raises_and_frees(media):
    himpi, dvpp = media
    frame = dvpp.malloc(geometry.picture(1280, 720, SOC, "vdec_out"))
    model = dvpp.malloc(geometry.picture(640, 640, SOC, "vpc_out"))
    himpi.vpc_crop_resize_paste = lambda *args: (0, 0xA0078003)
    with pytest.raises(Exception, match="vpc_crop_resize_paste returned 0xa0078003"):
        dvpp.letterbox(frame, model)
