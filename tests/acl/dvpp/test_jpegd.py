"""JPEGD: JPEG stills and MJPEG frames on the board's media units (through the pyACL and media
stand-ins) and their ``sim`` emulation. What JPEGD cannot decode (aclpythondevg_01_0476: a
progressive or arithmetic-coded JPEG, a grey one, an odd size) is told from the frame header
before the send and decoded on the CPU for that frame, counted (``jpegd_fallbacks``)."""

from __future__ import annotations

import numpy as np
import pytest
from himpi_standin import HimpiStandIn, StandInViolation

from edgefuse._cv import cv2
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.dvpp import jpeg
from edgefuse.acl.dvpp.units import BoardUnits
from edgefuse.fallback.dvpp_emulation import EmulatedUnits
from edgefuse.preprocess import Preprocess
from edgefuse.vision.model.adapter import InputPlan, prepare_frame
from edgefuse.vision.streams import dvpp_source
from edgefuse.vision.streams.dvpp_source import DvppSource

pytestmark = pytest.mark.standin
SOC = "Ascend310B4"
SPEC = AippSpec(input_format="YUV420SP", source_size=(96, 64), scale=(1 / 255,) * 3)  # jpeg CSC
PLAN = InputPlan("x", Preprocess((64, 96), layout="NHWC", dtype="uint8", scale=1.0, color="BGR"),
                 aipp=True,
                 yuv=SPEC)  # as an AIPP build plans it: the frame as BGR, AIPP converts


def scene(width=160, height=120):
    """A picture with colour and edges (a JPEG of flat grey would hide chroma mistakes)."""
    y, x = np.mgrid[:height, :width]
    image = np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], -1).astype(np.uint8)
    cv2().rectangle(image, (30, 20), (90, 70), (0, 0, 255), -1)
    return image


def encode(image, **flags):
    params = []
    if "sampling" in flags:
        params += [cv2().IMWRITE_JPEG_SAMPLING_FACTOR, flags["sampling"]]
    if flags.get("progressive"):
        params += [cv2().IMWRITE_JPEG_PROGRESSIVE, 1]
    return cv2().imencode(".jpg", image, [cv2().IMWRITE_JPEG_QUALITY, 95, *params])[1].tobytes()


def test_the_frame_header_tells_what_jpegd_decodes():
    image = scene()
    assert jpeg.read_header(encode(image)) == jpeg.JpegHeader("baseline", 160, 120, 8, "4:2:0")
    assert jpeg.jpegd_refusal(encode(image)) is None
    for factor, sampling in ((0x111111, "4:4:4"), (0x211111, "4:2:2")):
        assert jpeg.read_header(encode(image, sampling=factor)).sampling == sampling
        assert jpeg.jpegd_refusal(encode(image, sampling=factor)) is None
    assert "progressive" in jpeg.jpegd_refusal(encode(image, progressive=True))
    grey = cv2().imencode(".jpg", image[..., 0])[1].tobytes()
    assert "sampling grey" in jpeg.jpegd_refusal(grey)
    assert "odd size 159x120" in jpeg.jpegd_refusal(encode(image[:, :159]))
    assert "outside 32x32" in jpeg.jpegd_refusal(encode(image[:16, :16]))
    assert jpeg.jpegd_refusal(b"not a jpeg") == "no JPEG frame header"


@pytest.fixture
def board_units(standin):
    standin.himpi = HimpiStandIn(acl=standin)
    yield lambda: BoardUnits(SPEC, SOC)
    himpi = standin.himpi
    assert not himpi.initialised and not himpi.memory and not himpi.vdec


def model_inputs(path, units):
    source = DvppSource(path, PLAN, SOC, units=units)
    frames = list(source)
    counters = dict(source._pending)
    return [frame.device_input[0] for frame in frames], frames, counters


@pytest.mark.parametrize("sampling", [0x221111, 0x211111, 0x111111], ids=["420", "422", "444"])
def test_a_jpeg_still_on_jpegd_equals_the_emulation(tmp_path, board_units, sampling):
    path = tmp_path / "still.jpg"
    path.write_bytes(encode(scene(), sampling=sampling))
    board, frames, counters = model_inputs(path, board_units())
    sim, _, _ = model_inputs(path, EmulatedUnits(SPEC, SOC))
    assert len(board) == 1 and np.array_equal(board[0], sim[0])
    assert "jpegd_fallbacks" not in counters
    assert frames[0].size == (160, 120)
    # the frame a sink draws on, read in JPEG's full range (OpenCV's NV12 is limited range)
    image = frames[0].image.astype(int)
    assert np.abs(image - cv2().imread(str(path)).astype(int)).mean() < 3
    # against decode: cpu (OpenCV decodes, the letterbox in BGR, NV12 on the host): the same
    # picture; luma inside the content (84x64 at left 6: VPC's even sizes vs the CPU's 85)
    expected = prepare_frame(PLAN, cv2().imread(str(path)))[0]["x"][0]
    difference = board[0][:64, 8:88].astype(int) - expected[:64, 8:88].astype(int)
    assert np.abs(difference).mean() < 3


def test_a_progressive_jpeg_is_decoded_on_the_cpu_and_counted(tmp_path, board_units,
                                                               monkeypatch):
    baseline, progressive = tmp_path / "baseline.jpg", tmp_path / "progressive.jpg"
    baseline.write_bytes(encode(scene()))
    progressive.write_bytes(encode(scene(), progressive=True))
    board, _, counters = model_inputs(progressive, board_units())
    sim, _, sim_counters = model_inputs(progressive, EmulatedUnits(SPEC, SOC))
    assert counters["jpegd_fallbacks"] == sim_counters["jpegd_fallbacks"] == 1
    assert np.array_equal(board[0], sim[0])
    reference, _, _ = model_inputs(baseline, EmulatedUnits(SPEC, SOC))
    assert np.abs(board[0].astype(int) - reference[0].astype(int)).mean() < 2
    # the check before the send removed: the stand-in's own reading of the rules refuses it
    monkeypatch.setattr(dvpp_source.jpeg_rules, "jpegd_refusal", lambda data: None)
    units = board_units()
    with pytest.raises(StandInViolation, match="JPEGD was sent a JPEG it cannot decode: SOF2"):
        model_inputs(progressive, units)
    units.close()
