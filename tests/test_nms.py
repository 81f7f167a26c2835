"""The vectorised NMS against a plain greedy loop: ties, empty input, one class, many classes."""

from __future__ import annotations

import numpy as np
import pytest

import edgefuse.nms as nms_module
from edgefuse.nms import nms
from tests.needs import optional

pytestmark = pytest.mark.unit


def iou(a, b) -> float:
    width = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    height = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def reference_nms(boxes, scores, threshold, classes=None, max_det=None):
    """Textbook greedy NMS, one box at a time: best score first, ties by lower index; a box
    goes when its IoU with a kept box of its class is above the threshold."""
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    kept = []
    for i in order:
        if all(iou(boxes[i], boxes[k]) <= threshold
               or (classes is not None and classes[i] != classes[k]) for k in kept):
            kept.append(i)
    return kept[:max_det]


def random_boxes(rng, count, classes, spread):
    xy = rng.uniform(0, spread, (count, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 60, (count, 2))], axis=1)
    scores = np.round(rng.random(count), 1)  # many ties
    return boxes.astype(np.float32), scores.astype(np.float32), rng.integers(0, classes, count)


def test_empty_input_keeps_nothing():
    assert nms(np.zeros((0, 4)), np.zeros(0), 0.5).tolist() == []
    assert nms(np.zeros((0, 4)), np.zeros(0), 0.5, np.zeros(0, int)).tolist() == []


def test_ties_keep_the_lower_index_first():
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30], [20, 20, 30, 30]], float)
    scores = np.array([0.5, 0.5, 0.5, 0.5])
    assert nms(boxes, scores, 0.5).tolist() == [0, 2]


def test_iou_exactly_at_the_threshold_is_kept():
    boxes = np.array([[0, 0, 10, 10], [5, 0, 15, 10]], float)  # IoU = 50 / 150 = 1/3
    assert nms(boxes, [0.9, 0.8], 1 / 3 + 1e-6).tolist() == [0, 1]
    assert nms(boxes, [0.9, 0.8], 0.3).tolist() == [0]


@pytest.mark.parametrize("tile", [512, 1])
def test_iou_on_the_threshold_itself_is_kept(monkeypatch, tile):
    """[0, 0, 10, 5] inside [0, 0, 10, 10]: IoU 50 / 100 = 0.5 exactly, in float32 too; a box
    goes only when its IoU is above the threshold. Tile 1 takes the kept-vs-candidates path."""
    monkeypatch.setattr(nms_module, "TILE", tile)
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 5]], np.float32)
    assert nms(boxes, [0.9, 0.8], 0.5).tolist() == [0, 1]
    assert nms(boxes, [0.9, 0.8], 0.5, np.array([3, 3])).tolist() == [0, 1]
    assert nms(boxes, [0.9, 0.8], np.nextafter(np.float32(0.5), np.float32(0))).tolist() == [0]


def test_a_chain_resolves_greedily():
    # A suppresses B; B would have suppressed C, but B is gone, so C stays.
    boxes = np.array([[0, 0, 10, 10], [4, 0, 14, 10], [8, 0, 18, 10]], float)
    assert nms(boxes, [0.9, 0.8, 0.7], 0.3).tolist() == [0, 2]


def test_classes_never_suppress_each_other():
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], float)
    assert nms(boxes, [0.9, 0.8], 0.5, np.array([0, 1])).tolist() == [0, 1]
    assert nms(boxes, [0.9, 0.8], 0.5).tolist() == [0]


@pytest.mark.parametrize("classes", [1, 3, 80])
def test_matches_the_plain_loop_on_random_boxes(classes):
    rng = np.random.default_rng(classes)
    for _ in range(25):
        count = int(rng.integers(1, 150))
        boxes, scores, labels = random_boxes(rng, count, classes, rng.choice([30, 100, 400]))
        threshold = float(rng.choice([0.3, 0.45, 0.7]))
        expected = reference_nms(boxes.astype(np.float64), scores, threshold, labels)
        assert nms(boxes, scores, threshold, labels).tolist() == expected
        agnostic = reference_nms(boxes.astype(np.float64), scores, threshold)
        assert nms(boxes, scores, threshold).tolist() == agnostic
        assert nms(boxes, scores, threshold, labels, max_det=5).tolist() == expected[:5]


def test_many_candidates_across_tiles_match_the_textbook_loop(monkeypatch):
    monkeypatch.setattr(nms_module, "TILE", 64)
    monkeypatch.setattr(nms_module, "PAIR_CHUNK", 500)
    rng = np.random.default_rng(7)
    boxes, scores, labels = random_boxes(rng, 700, 4, 200)
    kept = nms(boxes, scores, 0.45, labels)
    expected = reference_nms(boxes.astype(np.float64), scores, 0.45, labels)
    assert kept.tolist() == expected
    assert nms(boxes, scores, 0.45, labels, max_det=10).tolist() == kept[:10].tolist()


def test_matches_opencvs_batched_nms():
    """OpenCV's C++ NMSBoxesBatched is an independent reference (class-aware, greedy)."""
    cv2 = optional("cv2")
    if not hasattr(cv2, "dnn") or not hasattr(cv2.dnn, "NMSBoxesBatched"):
        pytest.skip("this OpenCV has no dnn.NMSBoxesBatched")
    rng = np.random.default_rng(11)
    for _ in range(20):
        count = int(rng.integers(1, 400))
        boxes, _, labels = random_boxes(rng, count, 5, 300)
        scores = rng.random(count).astype(np.float32)
        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
        expected = np.array(cv2.dnn.NMSBoxesBatched(xywh.tolist(), scores.tolist(),
                                                    labels.tolist(), 0.0, 0.5)).ravel()
        assert nms(boxes, scores, 0.5, labels).tolist() == expected.tolist()
