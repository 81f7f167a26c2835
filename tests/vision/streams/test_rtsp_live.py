"""A real RTSP camera (GStreamer's RTSP server on 127.0.0.1, ``rtsp_server``) read by the CPU
live source (OpenCV's FFmpeg) and by ``decode: dvpp`` on ``sim`` (DvppLiveSource: PyAV demuxes,
the emulated VDEC decodes, VPC letterboxes): frames that are the clip's own, then the server is
killed (the source goes ``down``) and started again on the same port (``up``, counted in
``reconnects``), and frames come again. Driven by the source's state events and its reads, no
sleeps."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.fallback import dvpp_emulation as emu
from edgefuse.preprocess import Preprocess
from edgefuse.vision.model.adapter import InputPlan
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.streams.dvpp_source import DvppLiveSource, open_dvpp_source
from edgefuse.vision.streams.sources import Reconnect, open_source
from tests.fallback.test_dvpp_emulation import h264_clip
from tests.needs import optional
from tests.vision.streams.rtsp_server import RtspServer

pytestmark = pytest.mark.unit
SOC = "Ascend310B4"
SPEC = AippSpec(input_format="YUV420SP", source_size=(96, 64), scale=(1 / 255,) * 3,
                csc="bt601_narrow")  # the camera's H.264: limited range
PLAN = InputPlan("x", Preprocess((64, 96), layout="NHWC", dtype="uint8", scale=1.0, color="BGR"),
                 aipp=True, yuv=SPEC)
RECONNECT = Reconnect(attempts=None, backoff_s=0.05, max_backoff_s=0.2, timeout_s=3)
WAIT_S = 30  # for a state or a frame: a failing test ends, a passing one never waits this long


class Counts:
    """The source's counters (``Source.attach`` takes anything with ``count``)."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}

    def count(self, event: str, amount: int = 1) -> None:
        self.counters[event] = self.counters.get(event, 0) + amount


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    optional("av")
    # the whole demo clip: 150 frames, 10 s at 15 fps, longer than the test takes to run
    return h264_clip(SAMPLE_CLIP, tmp_path_factory.mktemp("rtsp") / "clip.mp4", frames=150)


@pytest.mark.parametrize("decode", ["cpu", "dvpp"])
def test_an_rtsp_camera_is_read_and_reconnected(decode, clip):
    cv2 = optional("cv2")
    if decode == "cpu":
        capture = cv2.VideoCapture(str(clip))
        clip_frames = [capture.read()[1] for _ in range(150)]
    else:
        clip_frames = [picture.to_bgr() for picture, _ in emu.decoded_pictures(clip, SOC)]
    server = RtspServer(clip).start()
    states: queue.Queue = queue.Queue()
    counts = Counts()
    source = None
    try:
        if decode == "cpu":
            source = open_source(server.url, reconnect=RECONNECT)
        else:
            source = open_dvpp_source(server.url, PLAN, emu.EmulatedUnits(SPEC, SOC), SOC,
                                      reconnect=RECONNECT)
            assert isinstance(source, DvppLiveSource)
        assert source.live
        source.attach(counts)
        source.on_state(lambda state, detail: states.put(state))
        before = [next_frame(source) for _ in range(3)]
        server.stop()
        assert states.get(timeout=WAIT_S) == "down"
        server.start()
        assert states.get(timeout=WAIT_S) == "up"
        after = [next_frame(source) for _ in range(3)]
    finally:
        if source is not None:
            source.close()
        server.stop()
    assert counts.counters["reconnects"] == 1 and counts.counters["drops"] == 1
    for frame in before + after:  # the clip's own pictures, decoded as the path decodes them
        assert frame.size == (320, 240)
        assert min(np.abs(frame.image.astype(int) - known).max() for known in clip_frames) == 0
    if decode == "dvpp":
        model_input, geometry = before[0].device_input
        assert model_input.shape == (96, 96) and geometry.src_size == (240, 320)
        assert "bgr_conversions" in counts.counters  # made only because the test read .image


def next_frame(source):
    frame = source.read(timeout=WAIT_S)
    assert frame is not None, "no frame from the RTSP camera"
    return frame
