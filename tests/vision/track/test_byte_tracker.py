"""ByteTracker on trajectories with known identities: crossings, misses, low scores, leaks."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.metrics.detect import Detections, box_iou
from edgefuse.vision.track import kalman
from edgefuse.vision.track.assignment import linear_assignment
from edgefuse.vision.track.byte_tracker import ByteTracker, TrackerOptions, buffered
from tests.needs import optional

pytestmark = pytest.mark.unit
optional("scipy")


def _box(cx: float, cy: float, w: float = 40.0, h: float = 80.0) -> list[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def _frame(boxes: list[list[float]], scores: list[float] | None = None,
           classes: list[int] | None = None) -> Detections:
    scores = scores if scores is not None else [0.9] * len(boxes)
    classes = classes if classes is not None else [0] * len(boxes)
    return Detections(np.array(boxes, dtype=np.float32).reshape(-1, 4),
                      np.array(scores, dtype=np.float32), np.array(classes))


def _ids_by_object(frames: list[Detections], tracker: ByteTracker) -> dict[int, set[int]]:
    """Which track IDs each ground-truth object (its detection row) was given, over the run."""
    seen: dict[int, set[int]] = {}
    for detections in frames:
        tracks = tracker.update(detections)
        for track_id, row in zip(tracks.ids, tracks.detection_index, strict=True):
            if row >= 0:
                seen.setdefault(int(row), set()).add(int(track_id))
    return seen


def test_two_objects_crossing_paths_keep_their_ids():
    # A walks right, B walks left on the same row: their boxes overlap fully mid-way
    frames = [_frame([_box(100 + 8 * t, 200), _box(500 - 8 * t, 204)]) for t in range(50)]
    seen = _ids_by_object(frames, ByteTracker())
    assert seen == {0: {1}, 1: {2}}


def test_a_missed_object_is_found_again_under_its_id():
    frames = [_frame([_box(100 + 5 * t, 200)]) for t in range(10)]
    frames += [_frame([]) for _ in range(5)]  # occluded: no detection for five frames
    frames += [_frame([_box(100 + 5 * t, 200)]) for t in range(15, 25)]
    seen = _ids_by_object(frames, ByteTracker())
    assert seen == {0: {1}}


def test_a_low_score_box_extends_its_track_but_starts_none():
    tracker = ByteTracker()
    for t in range(5):
        tracker.update(_frame([_box(100 + 5 * t, 200)]))
    # partly occluded: the score drops below track_thresh; ByteTrack's second round keeps it
    tracks = tracker.update(_frame([_box(125, 200)], scores=[0.3]))
    assert tracks.ids.tolist() == [1]
    # a low-score box alone never starts a track
    fresh = ByteTracker()
    fresh.update(_frame([_box(100, 200)], scores=[0.3]))
    assert len(fresh.update(_frame([_box(100, 200)], scores=[0.3]))) == 0


def test_a_lost_track_takes_a_low_score_box_where_bytetrack_would_not():
    # OC-SORT's BYTE round offers low-score boxes to lost tracks too; ByteTrack's reference only
    # to tracked ones, and a low-score box starts nothing: it would report no track here
    tracker = ByteTracker()
    for t in range(10):
        tracker.update(_frame([_box(100 + 5 * t, 200)]))
    for _ in range(3):
        assert len(tracker.update(_frame([]))) == 0  # hidden: the track is lost
    tracks = tracker.update(_frame([_box(170, 200)], scores=[0.3]))  # comes out, scored low
    assert tracks.ids.tolist() == [1]


def test_a_lost_track_keeps_its_last_size():
    # the box narrows 5 px a frame as its object goes behind another, then is hidden 8 frames;
    # it reappears at its last size. Were the width to keep shrinking while unseen (ByteTrack
    # freezes only the height), the prediction would be ~5 px wide: IoU ~0.1, a new ID
    options = TrackerOptions(lost_iou_buffer=0.0)  # plain IoU: the size alone decides
    frames = [_frame([_box(200, 200, w=100 - 5 * t)]) for t in range(11)]  # 100 -> 50 px
    frames += [_frame([]) for _ in range(8)]
    frames += [_frame([_box(200, 200, w=50)]) for _ in range(3)]
    assert _ids_by_object(frames, ByteTracker(options)) == {0: {1}}


def test_buffered_boxes_widen_by_the_ratio_on_every_side():
    boxes = np.array([[0.0, 0.0, 10.0, 20.0], [5.0, 5.0, 7.0, 6.0]])
    np.testing.assert_allclose(buffered(boxes, 0.3), [[-3, -6, 13, 26], [4.4, 4.7, 7.6, 6.3]])
    np.testing.assert_array_equal(buffered(boxes, 0.0), boxes)


def test_a_lost_track_is_matched_on_buffered_iou_a_tracked_one_is_not():
    # a still object hidden 3 frames reappears 30 px aside: plain IoU 800 / 5600 = 0.14, below
    # ByteTrack's 0.2 (x score 0.9); widened by 0.3 (64 x 128 boxes) IoU 4352 / 12032 = 0.36
    def run(hidden: int) -> list[int]:
        tracker = ByteTracker()
        for _ in range(10):
            tracker.update(_frame([_box(100, 200)]))
        for _ in range(hidden):
            tracker.update(_frame([]))
        return tracker.update(_frame([_box(130, 200)])).ids.tolist()
    assert run(hidden=3) == [1]
    assert run(hidden=0) == []  # tracked: plain IoU, no match; the new box is not confirmed yet


def test_a_tracked_track_keeps_its_detection_before_lost_ones_see_buffered_iou():
    # A (x 100) is seen, B (x 142) hidden 3 frames; then A's box comes at x 118: plain IoU with
    # A's prediction 22/58 = 0.38, with B's 16/64 = 0.25 but buffered by 0.3 40/88 = 0.45. In
    # one round on those similarities B would outbid A; the plain round comes first, so A keeps it
    tracker = ByteTracker()
    for _ in range(10):
        tracker.update(_frame([_box(100, 200), _box(142, 200)]))
    for _ in range(3):
        assert tracker.update(_frame([_box(100, 200)])).ids.tolist() == [1]
    assert tracker.update(_frame([_box(118, 200)])).ids.tolist() == [1]


def test_a_track_is_confirmed_on_its_second_frame_after_the_first():
    tracker = ByteTracker()
    tracker.update(_frame([]))
    assert len(tracker.update(_frame([_box(100, 200)]))) == 0  # seen once: unconfirmed
    tracks = tracker.update(_frame([_box(102, 200)]))
    assert tracks.ids.tolist() == [1]


def test_lost_tracks_are_forgotten_after_the_buffer():
    tracker = ByteTracker(TrackerOptions(track_buffer=10))
    for wave in range(20):  # 20 objects, each seen for 5 frames then gone
        for t in range(5):
            tracker.update(_frame([_box(60 * wave + 30, 100 + 3 * t)]))
    for _ in range(12):
        tracker.update(_frame([]))
    assert tracker.live_tracks == 0


def test_ids_are_counted_per_tracker():
    first, second = ByteTracker(), ByteTracker()
    for t in range(3):
        a = first.update(_frame([_box(100 + t, 200)]))
        b = second.update(_frame([_box(300 + t, 200)]))
    assert a.ids.tolist() == b.ids.tolist() == [1]


def test_class_of_the_last_matched_detection_is_kept():
    tracker = ByteTracker()
    tracker.update(_frame([_box(100, 200)], classes=[2]))
    tracks = tracker.update(_frame([_box(101, 200)], classes=[5]))
    assert tracks.classes.tolist() == [5]


def test_assignment_leaves_pairs_above_the_limit_unmatched():
    cost = np.array([[0.1, 0.9], [0.95, 0.85]])
    matches, rows, columns = linear_assignment(cost, 0.8)
    assert matches.tolist() == [[0, 0]]
    assert rows.tolist() == [1] and columns.tolist() == [1]
    # lap's extended problem: two matches at 0.4 (0.8) beat one at 0.1 + two left (0.1 + 2 * 0.4)
    cost = np.array([[0.1, 0.4], [0.4, 0.9]])
    matches, _, _ = linear_assignment(cost, 0.8)
    assert sorted(matches.tolist()) == [[0, 1], [1, 0]]


def test_kalman_follows_constant_velocity():
    measurements = kalman.xyxy_to_xywh(np.array([_box(100, 200)]))
    mean, covariance = kalman.initiate(measurements)
    for t in range(1, 20):
        mean, covariance = kalman.predict(mean, covariance)
        mean, covariance = kalman.update(mean, covariance,
                                         kalman.xyxy_to_xywh(np.array([_box(100 + 4 * t, 200)])))
    mean, _ = kalman.predict(mean, covariance)
    assert mean[0, 0] == pytest.approx(100 + 4 * 20, abs=0.5)  # predicted centre x
    assert mean[0, 4] == pytest.approx(4.0, abs=0.1)  # velocity x


def test_kalman_follows_a_box_that_changes_shape():
    # an object entering through a border: its box (cut by the edge) widens 4 px a frame while
    # its height stays; ByteTrack's aspect-ratio filter predicted IoU 0.72 with the next box here
    def box(t: int) -> np.ndarray:
        return np.array([_box(100, 160, w=40 + 4 * t, h=120)])

    mean, covariance = kalman.initiate(kalman.xyxy_to_xywh(box(0)))
    for t in range(1, 20):
        mean, covariance = kalman.predict(mean, covariance)
        mean, covariance = kalman.update(mean, covariance, kalman.xyxy_to_xywh(box(t)))
    mean, _ = kalman.predict(mean, covariance)
    assert box_iou(kalman.xywh_to_xyxy(mean), box(20))[0, 0] > 0.95


def _textbook_step(mean, covariance, measurement):
    """One track, one frame: predict then correct with explicit matrices (Welch & Bishop's
    form, (I - K H) P), noise as BoT-SORT's KalmanFilterXYWH sets it from the box's w and h."""
    motion, project = np.eye(8), np.eye(4, 8)
    motion[:4, 4:] = np.eye(4)
    w, h = mean[2], mean[3]
    q = np.diag(np.square([w / 20, h / 20, w / 20, h / 20, w / 160, h / 160, w / 160, h / 160]))
    mean, covariance = motion @ mean, motion @ covariance @ motion.T + q
    w, h = mean[2], mean[3]
    r = np.diag(np.square([w / 20, h / 20, w / 20, h / 20]))
    gain = covariance @ project.T @ np.linalg.inv(project @ covariance @ project.T + r)
    mean = mean + gain @ (measurement - project @ mean)
    covariance = (np.eye(8) - gain @ project) @ covariance
    return mean, covariance


def test_batched_kalman_matches_the_textbook_filter_track_by_track():
    rng = np.random.default_rng(0)
    centres = rng.uniform(50, 500, (5, 2))
    sizes = rng.uniform(20, 150, (5, 2))
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1)
    mean, covariance = kalman.initiate(kalman.xyxy_to_xywh(boxes))
    reference = [(mean[i].copy(), covariance[i].copy()) for i in range(5)]
    for _ in range(6):
        boxes = boxes + rng.normal(3.0, 2.0, boxes.shape)
        measured = kalman.xyxy_to_xywh(boxes)
        mean, covariance = kalman.predict(mean, covariance)
        mean, covariance = kalman.update(mean, covariance, measured)
        reference = [_textbook_step(m, c, z) for (m, c), z in zip(reference, measured, strict=True)]
    for i, (m, c) in enumerate(reference):
        np.testing.assert_allclose(mean[i], m, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(covariance[i], c, rtol=1e-7, atol=1e-9)


def test_options_are_checked():
    with pytest.raises(ValueError, match="low_thresh 0.6 is above track_thresh 0.5"):
        TrackerOptions(low_thresh=0.6)
    with pytest.raises(ValueError, match="lost_iou_buffer must be >= 0, got -0.1"):
        TrackerOptions(lost_iou_buffer=-0.1)


def _best_extended_cost(cost: np.ndarray, threshold: float) -> float:
    """lap's extended objective, minimised by brute force over every partial matching."""
    rows, columns = cost.shape
    best = (rows + columns) * threshold / 2  # nothing matched

    def walk(row: int, used: frozenset, total: float, matched: int) -> None:
        nonlocal best
        if row == rows:
            best = min(best, total + (rows + columns - 2 * matched) * threshold / 2)
            return
        walk(row + 1, used, total, matched)
        for column in range(columns):
            if column not in used:
                walk(row + 1, used | {column}, total + cost[row, column], matched + 1)

    walk(0, frozenset(), 0.0, 0)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_assignment_solves_laps_extended_problem(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 5, size=2))
    cost = rng.uniform(0.0, 1.0, shape)
    threshold = float(rng.uniform(0.3, 0.9))
    matches, rows, columns = linear_assignment(cost, threshold)
    achieved = cost[matches[:, 0], matches[:, 1]].sum() + (len(rows) + len(columns)) * threshold / 2
    assert achieved == pytest.approx(_best_extended_cost(cost, threshold))
    assert (cost[matches[:, 0], matches[:, 1]] < threshold).all()


def test_a_lost_track_lives_exactly_max_time_lost_frames():
    """track_buffer 30 at 30 fps: max_time_lost = 30 frames. A track last seen on frame L is
    kept while frame - L <= 30 (still there on L + 30), forgotten on L + 31."""
    tracker = ByteTracker(TrackerOptions(track_buffer=30, frame_rate=30))
    assert tracker.max_time_lost == 30
    for _ in range(5):
        tracker.update(_frame([_box(100, 200)]))  # last seen on frame L = 5
    for _ in range(30):  # frames 6 .. 35 = L + 30
        tracker.update(_frame([]))
    assert tracker.live_tracks == 1
    back = tracker.update(_frame([_box(100, 200)]))  # frame L + 31: matched before forgetting
    assert back.ids.tolist() == [1]


def test_a_lost_track_is_forgotten_on_the_frame_after_max_time_lost():
    tracker = ByteTracker(TrackerOptions(track_buffer=30, frame_rate=30))
    for _ in range(5):
        tracker.update(_frame([_box(100, 200)]))
    for _ in range(31):  # frame L + 31 without it: 31 > 30
        tracker.update(_frame([]))
    assert tracker.live_tracks == 0
    assert tracker.update(_frame([_box(100, 200)])).ids.tolist() == []  # a new, unconfirmed one


def test_of_two_duplicate_tracks_the_younger_one_goes():
    """Track 1 stands at x = 300 and vanishes (lost); a second object walks in at 12 px a
    frame and stops on the same spot. On that frame the detection matches the lost track 1
    (its still prediction overlaps exactly; track 2's overshoots), track 2 is left lost on
    the same box: a duplicate pair, and the younger (2) must go, so the spot keeps ID 1."""
    def square(cx: float) -> list[float]:
        return _box(cx, 300, 100, 100)

    tracker = ByteTracker()
    for _ in range(5):
        assert tracker.update(_frame([square(300)])).ids.tolist() == [1]
    ids = []
    for x in [*range(12, 300, 12), *[300] * 6]:
        ids.append(tracker.update(_frame([square(x)])).ids.tolist())
    assert [2] in ids  # the walker had its own track on the way
    assert ids[-6:] == [[1]] * 6
    assert tracker.live_tracks == 1
