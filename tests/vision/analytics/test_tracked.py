"""Tracked(detector): IDs, counts and events on walkers whose line crossings are known."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.task import Tracked
from edgefuse.vision.analytics.zone import Zone
from edgefuse.vision.scenes.tracks import walkers
from edgefuse.vision.streams.frames import Frame
from tests.needs import optional

pytestmark = pytest.mark.unit
optional("scipy")
LINE_Y = 360.0
MARGIN = 3.0


class _Scripted:
    """A detector stand-in that reports the given frames' boxes, one frame per call."""

    class_names = ("person", "cart")
    colours = np.array([[0, 0, 255], [0, 255, 0]], dtype=np.uint8)

    def __init__(self, frames):
        self.frames = iter(frames)

    def postprocess(self, outputs, geometry):
        return next(self.frames)

    def describe(self, result):
        return {"detections": len(result)}


def _true_crossings(truth) -> dict[str, int]:
    """Crossings of y = LINE_Y by each identity's bottom-centre, settled outside the margin."""
    side: dict[int, int] = {}
    counts = {"in": 0, "out": 0}
    for frame in truth:
        for box, identity in zip(frame.boxes, frame.ids, strict=True):
            distance = float(box[3]) - LINE_Y  # > 0 below the line
            if abs(distance) <= MARGIN:
                continue
            now = 1 if distance > 0 else -1
            if identity in side and side[identity] != now:
                counts["in" if now > 0 else "out"] += 1
            side[identity] = now
    return counts


def test_counts_on_noise_free_walkers_equal_the_true_crossings():
    truth = walkers(seed=3, frames=300, population=12, classes=1)
    detections = [Detections(f.boxes, np.full(len(f.ids), 0.9, np.float32), f.classes)
                  for f in truth]
    received = []

    class _Collect:
        def publish(self, event):
            received.append(event)

    line = LineCounter("middle", (-10_000, LINE_Y), (10_000, LINE_Y), margin=MARGIN)
    tracked = Tracked(_Scripted(detections), stream="hall", lines=[line],
                      publishers=[_Collect()])
    for index in range(len(truth)):
        frame = Frame(index=index, image=np.zeros((1, 1, 3), np.uint8), time=1000.0 + index,
                      clock=0.0)
        result = tracked.postprocess({}, None, frame)
    expected = _true_crossings(truth)
    assert expected["in"] + expected["out"] >= 5  # the scenario does cross the line
    totals = line.totals()
    assert {d: sum(totals[d].values()) for d in ("in", "out")} == expected
    assert len(received) == expected["in"] + expected["out"]
    assert all(e["stream"] == "hall" and e["time"] >= 1000.0 for e in received)
    record = tracked.describe(result)
    assert record["stream"] == "hall" and record["counts"]["lines"]["middle"] == totals
    assert {"id", "class", "box", "score"} <= set(record["tracks"][0])


def test_zone_dwell_uses_the_frames_capture_time():
    boxes = [Detections(np.array([[40, 20, 60, 50]], np.float32), np.array([0.9], np.float32),
                        np.array([0]))] * 6
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)], confirm_frames=1)
    tracked = Tracked(_Scripted(boxes), zones=[zone])
    for index in range(6):
        frame = Frame(index=index, image=np.zeros((1, 1, 3), np.uint8), time=50.0 + 2 * index,
                      clock=7.0 + 2 * index)
        tracked.postprocess({}, None, frame)
    # ByteTrack confirms tracks of its first frame at once: inside since clock 7; now 17
    assert list(zone.dwell(17.0).values()) == [pytest.approx(10.0)]


def _one_box(x: float) -> Detections:
    return Detections(np.array([[x, 20, x + 60, 50]], np.float32), np.array([0.9], np.float32),
                      np.array([0]))


WALK_OUT = [_one_box(20)] * 5 + [_one_box(45), _one_box(75), _one_box(75)]  # out at frame 6


@pytest.mark.parametrize("step_s", [-3600.0, 86400.0, -1.7e9])
def test_dwell_is_right_when_the_wall_clock_steps_mid_stay(step_s):
    """The wall clock steps (back an hour, forward a day, from 2023 to 1970) while an object is
    in the zone: dwell is its 6 s on the monotonic clock; the events' ``time`` shows the wall
    clock (with the step) and ``mono`` the monotonic one."""
    boxes = WALK_OUT
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)], confirm_frames=1)
    tracked = Tracked(_Scripted(boxes), zones=[zone])
    events = []
    for index in range(len(boxes)):
        wall = 1_700_000_000.0 + index + (step_s if index >= 2 else 0.0)
        frame = Frame(index=index, image=np.zeros((1, 1, 3), np.uint8), time=wall,
                      clock=3000.0 + index)
        events += tracked.postprocess({}, None, frame).events
    assert [e["type"] for e in events] == ["zone_entered", "zone_left"]
    assert events[1]["dwell_s"] == pytest.approx(6.0)  # entered at clock 3000, left at 3006
    assert events[1]["mono"] == pytest.approx(3006.0)
    assert events[1]["time"] == pytest.approx(1_700_000_006.0 + step_s)


def test_a_file_sources_dwell_is_in_its_own_media_time():
    """A file read faster than real time: dwell in its pts, not in how fast it was read."""
    boxes = WALK_OUT
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)], confirm_frames=1)
    tracked = Tracked(_Scripted(boxes), zones=[zone])
    events = []
    for index in range(len(boxes)):
        frame = Frame(index=index, image=np.zeros((1, 1, 3), np.uint8), time=1e9 + index / 1e3,
                      clock=10.0 + index / 1e3, pts=index / 25)
        events += tracked.postprocess({}, None, frame).events
    assert events[1]["dwell_s"] == pytest.approx(0.24)  # 6 frames at 25 fps


def _walk(xs, scale: float = 1.0) -> list[Detections]:
    return [Detections(np.array([[x * scale, 20 * scale, (x + 40) * scale, 60 * scale]],
                                np.float32), np.array([0.9], np.float32), np.array([0]))
            for x in xs]


def test_a_camera_switching_to_a_resolution_of_the_same_aspect_keeps_ids_lines_and_zones():
    """640x480 -> 320x240 mid-walk: the line and zone are rescaled with the frame, the track
    keeps its ID and is counted once, exactly as a walk at one size (the reference)."""
    xs = list(range(0, 200, 10))  # the box's centre walks from x 20 to 210, across x = 100

    def run(scales):
        line = LineCounter("gate", (100, 0), (100, 480), margin=2)
        zone = Zone("right", [(120, 0), (640, 0), (640, 480), (120, 480)], confirm_frames=1)
        detections = [_walk([x], s)[0] for x, s in zip(xs, scales, strict=True)]
        tracked = Tracked(_Scripted(detections), lines=[line], zones=[zone],
                          check_first_frame=True)
        events = []
        for index, scale in enumerate(scales):
            image = np.zeros((int(480 * scale), int(640 * scale), 3), np.uint8)
            frame = Frame(index=index, image=image, time=1e9 + index, clock=float(index))
            events += tracked.postprocess({}, None, frame).events
        return events, tracked

    reference, _ = run([1.0] * len(xs))
    events, tracked = run([1.0] * 8 + [0.5] * (len(xs) - 8))  # switched before the line
    assert [(e["type"], e["track_id"]) for e in events] == [
        (e["type"], e["track_id"]) for e in reference]
    assert [e["type"] for e in events] == ["line_crossed", "zone_entered"]
    assert tracked.resized == 1 and tracked.lines[0].start.tolist() == [50.0, 0.0]


def test_a_camera_switching_to_another_aspect_ratio_is_refused_naming_both_sizes():
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)])
    tracked = Tracked(_Scripted(_walk([0, 10])), zones=[zone], check_first_frame=True)
    tracked.postprocess({}, None, Frame(0, np.zeros((480, 640, 3), np.uint8), 1e9, 0.0))
    with pytest.raises(InputError, match=r"changed from 640x480 to 640x360 mid-stream.*"
                                         r"another aspect ratio"):
        tracked.postprocess({}, None, Frame(1, np.zeros((360, 640, 3), np.uint8), 1e9, 1.0))
