"""Counting lines and zones on tracks with known paths: exact counts, no jitter double-counts."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.zone import Zone, points_in_polygon
from edgefuse.vision.track.byte_tracker import Tracks

pytestmark = pytest.mark.unit


def _tracks(points: dict[int, tuple[float, float]], class_id: int = 0) -> Tracks:
    """Tracks whose bottom-centre anchor is exactly each given point."""
    ids = sorted(points)
    boxes = [[points[i][0] - 10, points[i][1] - 30, points[i][0] + 10, points[i][1]] for i in ids]
    return Tracks(np.array(boxes, dtype=np.float64).reshape(-1, 4), np.ones(len(ids)),
                  np.full(len(ids), class_id), np.array(ids), np.full(len(ids), -1))


def _run(counter: LineCounter, paths: dict[int, list[tuple[float, float]]]) -> list[dict]:
    events = []
    for step in range(max(len(p) for p in paths.values())):
        here = {i: p[step] for i, p in paths.items() if step < len(p)}
        events += counter.update(_tracks(here), ["person"])
    return events


def _horizontal_line() -> LineCounter:
    # y = 100 from x = 0 to x = 200; left of start->end is y < 100 (up), so moving down is "in"
    return LineCounter("door", (0, 100), (200, 100), margin=3)


def test_a_track_crossing_down_counts_in_once_and_back_up_counts_out():
    counter = _horizontal_line()
    down_and_up = [(50, y) for y in range(80, 121, 4)] + [(50, y) for y in range(120, 79, -4)]
    events = _run(counter, {1: down_and_up})
    assert [e["direction"] for e in events] == ["in", "out"]
    assert counter.totals() == {"in": {"person": 1}, "out": {"person": 1}}


def test_jitter_across_the_line_within_the_margin_counts_nothing():
    counter = _horizontal_line()
    jitter = [(60, 100 + (2 if t % 2 else -2)) for t in range(40)]
    assert _run(counter, {1: [(60, 90)] + jitter}) == []


def test_jitter_after_a_real_crossing_counts_one():
    counter = _horizontal_line()
    path = [(60, 90), (60, 96), (60, 104), (60, 98), (60, 102), (60, 99), (60, 110), (60, 101)]
    events = _run(counter, {1: path})
    assert [e["direction"] for e in events] == ["in"]


def test_touching_the_line_and_going_back_counts_nothing():
    counter = _horizontal_line()
    assert _run(counter, {1: [(60, 80), (60, 90), (60, 100), (60, 90), (60, 80)]}) == []


def test_crossing_beside_the_segment_counts_nothing():
    counter = _horizontal_line()
    assert _run(counter, {1: [(250, 80), (250, 120)], 2: [(-5, 80), (-5, 120)]}) == []
    # near the end but on the segment: counted
    assert len(_run(counter, {3: [(199, 80), (199, 120)]})) == 1


def test_each_track_counts_separately_and_by_class():
    counter = _horizontal_line()
    counter.update(_tracks({1: (20, 90), 2: (40, 90)}, class_id=0), ["person", "car"])
    counter.update(_tracks({1: (20, 110)}, class_id=0), ["person", "car"])
    counter.update(_tracks({2: (40, 110)}, class_id=1), ["person", "car"])
    assert counter.totals()["in"] == {"car": 1, "person": 1}


def test_a_zero_length_line_is_refused():
    with pytest.raises(InputError, match="line 'x' has zero length"):
        LineCounter("x", (5, 5), (5, 5))


def test_points_in_polygon_against_hand_checked_points():
    square = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], dtype=np.float64)
    points = np.array([[5, 5], [15, 5], [-1, 5], [5, 11], [9.9, 0.1]])
    assert points_in_polygon(points, square).tolist() == [True, False, False, False, True]
    concave = np.array([[0, 0], [10, 0], [10, 10], [5, 5], [0, 10]], dtype=np.float64)
    assert points_in_polygon(np.array([[5, 8], [5, 2]]), concave).tolist() == [False, True]


def test_zone_entries_exits_and_dwell_in_capture_time():
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)], confirm_frames=2)
    path = [(150, 50)] * 2 + [(50, 50)] * 5 + [(150, 50)] * 3
    events = []
    for step, point in enumerate(path):
        events += zone.update(_tracks({7: point}), time=10.0 + 0.5 * step, names=["person"])
    assert [(e["type"], e["track_id"]) for e in events] == [("zone_entered", 7), ("zone_left", 7)]
    # entered when confirmed on step 3 (t = 11.5), left when confirmed on step 8 (t = 14.0)
    assert events[1]["dwell_s"] == pytest.approx(2.5)
    assert zone.entries == {"person": 1} and zone.exits == {"person": 1}
    assert zone.occupancy() == {}


def test_a_border_flicker_shorter_than_confirm_frames_changes_nothing():
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)], confirm_frames=3)
    path = [(50, 50)] * 3 + [(101, 50), (99, 50), (101, 50), (99, 50)] + [(50, 50)] * 2
    events = []
    for step, point in enumerate(path):
        events += zone.update(_tracks({1: point}), time=float(step))
    assert [e["type"] for e in events] == ["zone_entered"]
    assert zone.occupancy() == {"class0": 1}


@pytest.mark.parametrize(("polygon", "message"), [
    ([(0, 0), (10, 10)], "has 2 points; a polygon needs at least 3"),
    ([(0, 0), (5, 5), (10, 10)], "has no area"),
])
def test_bad_zones_are_refused(polygon, message):
    with pytest.raises(InputError, match=message):
        Zone("z", polygon)


def test_a_zone_outside_the_frame_is_refused():
    zone = Zone("z", [(0, 0), (700, 0), (700, 100)])
    with pytest.raises(InputError, match=r"point \[700.0, 0.0\] outside the 640x480 frame"):
        zone.check_within(640, 480)


def test_by_default_a_line_ignores_jitter_of_a_few_pixels():
    """The default margin (3 px) settles no side within it: a box jittering 2 px about the
    line counts nothing (with margin 0 every flip would count)."""
    counter = LineCounter("door", (0, 100), (200, 100))
    jitter = [(60, 100 + (2 if t % 2 else -2)) for t in range(40)]
    assert _run(counter, {1: [(60, 90)] + jitter}) == []
    assert counter.totals() == {"in": {}, "out": {}}


def test_the_pending_count_restarts_when_a_track_returns_to_its_side():
    """confirm_frames 3: three frames outside, but never three in a row (inside between each),
    is no exit; three in a row then is one."""
    zone = Zone("bay", [(0, 0), (100, 0), (100, 100), (0, 100)], confirm_frames=3)
    flicker = [(101, 50), (99, 50), (101, 50), (99, 50), (101, 50), (99, 50)]
    path = [(50, 50)] * 3 + flicker
    events = []
    for step, point in enumerate(path):
        events += zone.update(_tracks({1: point}), time=float(step))
    assert [e["type"] for e in events] == ["zone_entered"]
    for step in range(3):
        events += zone.update(_tracks({1: (150, 50)}), time=float(len(path) + step))
    assert [e["type"] for e in events] == ["zone_entered", "zone_left"]
