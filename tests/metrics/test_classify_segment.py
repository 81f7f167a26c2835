"""Top-k agreement and mean IoU against hand-computed cases."""

import numpy as np
import pytest

from edgefuse.metrics.classify import topk_agreement
from edgefuse.metrics.segment import confusion, mean_iou

pytestmark = pytest.mark.unit


def test_topk_agreement_hand_case():
    reference = np.array([[0.1, 0.9, 0.0, 0.0, 0.0, 0.0],   # top-1: 1
                          [0.8, 0.1, 0.0, 0.0, 0.0, 0.0],   # top-1: 0
                          [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])  # top-1: 5
    candidate = np.array([[0.1, 0.9, 0.0, 0.0, 0.0, 0.0],   # agrees
                          [0.1, 0.8, 0.0, 0.0, 0.0, 0.0],   # 0 is second: top-5 only
                          [0.6, 0.5, 0.4, 0.3, 0.2, 0.1]])  # 5 is sixth: neither
    result = topk_agreement(reference, candidate)
    assert result == {"top1": pytest.approx(1 / 3), "top5": pytest.approx(2 / 3)}


def test_topk_flattens_trailing_axes_and_rejects_shape_mismatch():
    scores = np.random.default_rng(0).standard_normal((2, 10, 1, 1))
    assert topk_agreement(scores, scores) == {"top1": 1.0, "top5": 1.0}
    with pytest.raises(ValueError, match="score shapes differ"):
        topk_agreement(scores, scores[:, :5])


def test_mean_iou_hand_case():
    reference = np.array([[0, 0, 1, 1],
                          [0, 0, 1, 2]])
    candidate = np.array([[0, 0, 1, 1],
                          [0, 1, 1, 1]])
    # class 0: tp 3, ref 4, cand 3 -> 3/4; class 1: tp 3, ref 3, cand 5 -> 3/5; class 2: 0/1
    result = mean_iou(reference, candidate, classes=4)
    assert result["mean_iou"] == pytest.approx((3 / 4 + 3 / 5 + 0) / 3)
    assert result["pixel_agreement"] == pytest.approx(6 / 8)
    assert result["classes_present"] == 3


def test_confusion_rows_are_reference_labels():
    matrix = confusion(np.array([0, 0, 1]), np.array([0, 1, 1]), classes=2)
    assert matrix.tolist() == [[1, 1], [0, 1]]
