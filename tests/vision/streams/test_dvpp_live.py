"""Live streams on DVPP behave as the CPU live sources do (``LiveSource``'s machinery): a real
MJPEG camera on 127.0.0.1 whose first connection carries broken parts, garbage, a progressive
JPEG and a resolution change and then breaks, the second good. Decoded on the board's media units
(through the pyACL and media stand-ins) and on their ``sim`` emulation. A real RTSP camera
(GStreamer's RTSP server; ffmpeg cannot serve RTSP) is read and reconnected, on the CPU and on
DVPP, in test_rtsp_live.py."""

from __future__ import annotations

import numpy as np
import pytest
from himpi_standin import HimpiStandIn

from edgefuse._cv import cv2
from edgefuse.acl.dvpp.units import BoardUnits
from edgefuse.fallback.dvpp_emulation import EmulatedUnits
from edgefuse.testing.mjpeg import MjpegServer, part
from edgefuse.vision.streams.dvpp_source import DvppLiveSource, open_dvpp_source
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import Reconnect
from tests.acl.dvpp.test_jpegd import PLAN, SOC, SPEC
from tests.vision.streams.test_broken_cameras import (
    BROKEN_PARTS,
    FIRST_CONNECTION,
    GARBAGE_RUNS,
    GOOD_1,
    GOOD_2,
    LAST,
    PACE_FPS,
    SECOND_CONNECTION,
)

pytestmark = pytest.mark.standin
PROGRESSIVE_LEVEL = 55  # between the frames around it: the levels stay in order
PROGRESSIVE = cv2().imencode(".jpg", np.full((96, 128, 3), PROGRESSIVE_LEVEL, np.uint8),
                             [cv2().IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
# the zeroed part keeps its SOI/EOI: the reader passes it on, no decoder reads it (counted here)
FIRST = [*FIRST_CONNECTION[:-1], part(PROGRESSIVE), FIRST_CONNECTION[-1]]


class DeviceLevels:
    """The model input's mean luma inside the letterbox content, and the frame's size."""

    def preprocess_device(self, model_input, geometry):
        height, width = geometry.content_size
        luma = model_input[geometry.pad_top:geometry.pad_top + height,
                           geometry.pad_left:geometry.pad_left + width]
        return {}, (int(round(float(luma.mean()))), geometry.src_size)

    def infer(self, feeds):
        return {}

    def postprocess(self, outputs, seen):
        return seen

    def describe(self, result):
        return {}


@pytest.mark.parametrize("where", ["sim", "board"])
def test_a_live_camera_on_dvpp_drops_stale_frames_counts_errors_and_reconnects(where, request):
    if where == "board":
        standin = request.getfixturevalue("standin")
        standin.himpi = HimpiStandIn(acl=standin)
        units = BoardUnits(SPEC, SOC)
    else:
        units = EmulatedUnits(SPEC, SOC)
    camera = MjpegServer(fps=PACE_FPS, scripts=[FIRST, SECOND_CONNECTION]).start()
    seen, states = [], []

    def collect(result):
        seen.append(result.result)
        return result.result[0] != LAST

    try:
        source = open_dvpp_source(camera.url, PLAN, units, SOC, reconnect=Reconnect(
            attempts=3, backoff_s=0.01, max_backoff_s=0.05, timeout_s=5))
        assert isinstance(source, DvppLiveSource) and source.live
        assert source.frame_size == (64, 48)
        source.on_state(lambda state, detail: states.append(state))
        pipeline = Pipeline(source, DeviceLevels(), [CallbackSink(collect)], report_every=None)
        summary = pipeline.run()
        source.close()
    finally:
        camera.stop()
    counters = summary.stats.counters
    assert summary.reason == "sink_closed"
    assert counters["decode_errors"] == BROKEN_PARTS + GARBAGE_RUNS
    assert counters["reconnects"] == 1 and counters["drops"] == 1 and states == ["down", "up"]
    assert counters["jpegd_fallbacks"] == 1  # the progressive part: decoded on the CPU
    assert "bgr_conversions" not in counters  # nothing drew: no BGR frame was made
    levels = [level for level, _ in seen]
    good = sorted(GOOD_1 + [PROGRESSIVE_LEVEL] + GOOD_2)
    assert levels == sorted(levels) and levels[-1] == LAST  # in order, the broken left out
    assert all(min(abs(level - g) for g in good) <= 2 for level in levels)
    assert len(seen) + counters.get("dropped", 0) == len(good)  # every good frame, or stale
    assert {size for _, size in seen} == {(48, 64), (96, 128)}
    if where == "board":
        himpi = request.getfixturevalue("standin").himpi
        assert himpi.calls.count("vdec_create_chn") == 2  # one channel per connection
        assert not himpi.initialised and not himpi.memory and not himpi.vdec
