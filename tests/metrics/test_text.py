"""Text detection scores against hand-counted values and a brute-force polygon IoU."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.metrics.text import pixel_scores, quad_iou, word_scores

pytestmark = pytest.mark.unit


def _rect(x0, y0, x1, y1):
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)


def _rotated(cx, cy, w, h, degrees):
    angle = np.radians(degrees)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    corners = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    return (corners @ rotation.T + (cx, cy)).astype(np.float32)


def _sampled_iou(a, b, step=0.02):
    """IoU by sampling a fine grid: half-plane tests against each convex quad's edges."""
    lo = np.minimum(a.min(0), b.min(0)) - 1
    hi = np.maximum(a.max(0), b.max(0)) + 1
    xs, ys = np.meshgrid(np.arange(lo[0], hi[0], step), np.arange(lo[1], hi[1], step))
    points = np.stack([xs.ravel(), ys.ravel()], 1)

    def inside(quad):
        signs = []
        for k in range(4):
            edge = quad[(k + 1) % 4] - quad[k]
            offset = points - quad[k]
            signs.append(edge[0] * offset[:, 1] - edge[1] * offset[:, 0])
        signs = np.stack(signs)
        return (signs >= 0).all(0) | (signs <= 0).all(0)

    in_a, in_b = inside(a), inside(b)
    return (in_a & in_b).sum() / (in_a | in_b).sum()


@pytest.mark.parametrize(("a", "b"), [
    (_rect(0, 0, 2, 2), _rect(1, 1, 3, 3)),
    (_rotated(5, 5, 8, 2, 30), _rotated(6, 5, 8, 2, -10)),
    (_rotated(5, 5, 8, 2, 30), _rotated(5, 5, 8, 2, 30)[::-1]),  # the other orientation
    (_rotated(5, 5, 4, 4, 45), _rect(5, 0, 12, 12)),
])
def test_quad_iou_agrees_with_sampling(a, b):
    assert quad_iou(a, b) == pytest.approx(_sampled_iou(a, b), abs=0.01)


def test_quad_iou_of_disjoint_and_degenerate_quads_is_zero():
    assert quad_iou(_rect(0, 0, 1, 1), _rect(2, 2, 3, 3)) == 0.0
    assert quad_iou(_rect(0, 0, 1, 0), _rect(0, 0, 1, 1)) == 0.0
    assert quad_iou(_rect(0, 0, 1, 1), _rect(0, 0, 1, 1)) == pytest.approx(1.0)


def test_pixel_scores_count_hits_misses_and_false_alarms():
    truth = np.zeros((4, 4), bool)
    truth[:2] = True  # 8 pixels
    found = np.zeros((4, 4), bool)
    found[1:3] = True  # 8 pixels, 4 of them true
    scores = pixel_scores(found, truth)
    assert scores == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "iou": pytest.approx(1 / 3)}
    empty = np.zeros((4, 4), bool)
    assert pixel_scores(empty, empty)["f1"] == 1.0 and pixel_scores(found, empty)["f1"] == 0.0


def test_words_match_one_to_one_above_the_iou():
    words = [_rect(0, 0, 10, 4), _rect(20, 0, 30, 4)]
    boxes = [_rect(0, 0, 10, 4), _rect(0.5, 0, 10, 4),  # two boxes on the first word
             _rect(20, 0, 24, 4)]  # IoU 0.4 with the second: not a match
    scores = word_scores([boxes], [words])
    assert (scores["matched"], scores["words"], scores["boxes"]) == (1, 2, 3)
    assert scores["recall"] == 0.5 and scores["precision"] == pytest.approx(1 / 3)
    assert word_scores([boxes], [words], min_iou=0.4)["matched"] == 2
    overlapping = [_rect(0, 0, 10, 4), _rect(1, 0, 11, 4)]  # one box cannot count for both
    assert word_scores([[_rect(0, 0, 10, 4)]], [overlapping])["matched"] == 1
    assert word_scores([[]], [[]]) == {"recall": 1.0, "precision": 1.0, "hmean": 1.0,
                                       "matched": 0, "words": 0, "boxes": 0}
