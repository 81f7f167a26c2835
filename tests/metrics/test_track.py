"""Tracking scores and true line crossings on sequences small enough to score by hand."""

import numpy as np
import pytest

from edgefuse.metrics.track import TrackFrame, line_crossings, score_tracks
from tests.needs import optional

pytestmark = pytest.mark.unit

A_BOX = [0.0, 0.0, 20.0, 20.0]
B_BOX = [100.0, 0.0, 120.0, 20.0]


def _frame(pairs):
    return TrackFrame(np.array([i for i, _ in pairs], np.int64),
                      np.array([b for _, b in pairs], np.float32).reshape(-1, 4))


def test_perfect_tracks_score_one_whatever_their_ids():
    optional("scipy")
    truth = [_frame([(1, A_BOX), (2, B_BOX)])] * 5
    predicted = [_frame([(70, A_BOX), (80, B_BOX)])] * 5
    scores = score_tracks(truth, predicted)
    assert (scores.idf1, scores.mota, scores.id_switches) == (1.0, 1.0, 0)


def test_two_ids_swapped_halfway_are_two_switches_and_half_the_identity_matches():
    optional("scipy")
    truth = [_frame([(1, A_BOX), (2, B_BOX)])] * 10
    predicted = [_frame([(10, A_BOX), (20, B_BOX)])] * 5 + [_frame([(20, A_BOX), (10, B_BOX)])] * 5
    scores = score_tracks(truth, predicted)
    assert scores.id_switches == 2
    assert scores.mota == pytest.approx(1 - 2 / 20)
    assert scores.idf1 == pytest.approx(2 * 10 / 40)  # each truth ID keeps one half


def test_a_miss_a_false_box_and_a_new_id_after_the_gap():
    optional("scipy")
    truth = [_frame([(1, A_BOX)])] * 10
    predicted = ([_frame([(7, A_BOX)])] * 2 + [_frame([(7, A_BOX), (9, B_BOX)])]
                 + [_frame([(7, A_BOX)])] + [_frame([])] + [_frame([(8, A_BOX)])] * 5)
    scores = score_tracks(truth, predicted)
    assert (scores.misses, scores.false_positives, scores.id_switches) == (1, 1, 1)
    assert scores.mota == pytest.approx(1 - 3 / 10)
    assert scores.idf1 == pytest.approx(2 * 5 / (10 + 10))  # truth 1 <-> ID 8 (5 frames)


def test_boxes_overlapping_under_the_threshold_do_not_match():
    optional("scipy")
    shifted = [15.0, 0.0, 35.0, 20.0]  # IoU 5/35 with A_BOX
    scores = score_tracks([_frame([(1, A_BOX)])] * 4, [_frame([(1, shifted)])] * 4)
    assert (scores.misses, scores.false_positives, scores.idf1) == (4, 4, 0.0)


def _walker(object_id, bottoms, x=50.0):
    return [[(object_id, [x - 5, y - 10, x + 5, y])] for y in bottoms]


def test_crossings_count_each_way_through_the_segment_only():
    line = ((0.0, 50.0), (100.0, 50.0))  # in = downwards (y grows)
    down_and_up = _walker(1, [30, 45, 55, 70, 40])
    beside = _walker(2, [30, 70, 30], x=150.0)
    touching = _walker(3, [40, 50, 40])
    frames = [_frame(a + b + c) for a, b, c in zip(down_and_up, beside + [[]] * 2,
                                                   touching + [[]] * 2, strict=True)]
    assert line_crossings(frames, *line) == {"in": 1, "out": 1}
    reversed_line = (line[1], line[0])
    assert line_crossings(frames, *reversed_line) == {"in": 1, "out": 1}
    assert line_crossings([_frame(f) for f in _walker(1, [30, 70])], *reversed_line) == {
        "in": 0, "out": 1}


def test_an_object_hidden_for_frames_is_counted_from_where_it_was_last_seen():
    frames = [_frame(f) for f in _walker(4, [30])] + [_frame([])] * 3 + [
        _frame(f) for f in _walker(4, [90])]
    assert line_crossings(frames, (0.0, 50.0), (100.0, 50.0)) == {"in": 1, "out": 0}


def test_a_match_of_the_frame_before_is_kept_over_a_closer_box():
    optional("scipy")
    near_a, near_b = [0.0, 0.0, 20.0, 20.0], [4.0, 0.0, 24.0, 20.0]
    truth = [_frame([(1, A_BOX), (2, B_BOX)]), _frame([(1, near_a), (2, near_b)])]
    predicted = [_frame([(5, A_BOX), (6, B_BOX)]),
                 # 5 overlaps B better (IoU 19/21) than A (17/23), 6 the other way round
                 _frame([(5, [3.0, 0.0, 23.0, 20.0]), (6, [1.0, 0.0, 21.0, 20.0])])]
    scores = score_tracks(truth, predicted)
    assert (scores.id_switches, scores.mota) == (0, 1.0)
