"""COCO-style AP and YOLO decoding against hand-computed cases (NMS: tests/test_nms.py)."""

import numpy as np
import pytest

from edgefuse.metrics.detect import (
    Detections,
    average_precision,
    box_iou,
    decode_yolo,
)

pytestmark = pytest.mark.unit


def _det(boxes, scores=None, classes=None) -> Detections:
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    n = len(boxes)
    scores = np.ones(n) if scores is None else np.asarray(scores, dtype=np.float64)
    classes = np.zeros(n, int) if classes is None else np.asarray(classes)
    return Detections(boxes, scores, classes)


def test_box_iou_hand_values():
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[5, 0, 15, 10], [0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 5, 5]])
    np.testing.assert_allclose(box_iou(a, b), [[50 / 150, 1.0, 0.0, 25 / 100]])


def test_perfect_predictions_score_one():
    truth = [_det([[0, 0, 10, 10], [20, 20, 40, 40]], classes=[0, 1])]
    result = average_precision(truth, truth)
    assert result["AP50"] == 1.0 and result["AP50:95"] == 1.0 and result["classes"] == 2


def test_a_confident_false_positive_caps_precision_at_two_thirds():
    # scores 0.9 (FP), 0.8 (TP), 0.7 (TP): precision 0, 1/2, 2/3 at recall 0, 1/2, 1;
    # monotone from the right: 2/3 at every recall point -> AP = 2/3 at every IoU threshold.
    truth = [_det([[0, 0, 10, 10], [20, 20, 30, 30]])]
    found = [_det([[50, 50, 60, 60], [0, 0, 10, 10], [20, 20, 30, 30]], [0.9, 0.8, 0.7])]
    result = average_precision(found, truth)
    assert result["AP50"] == pytest.approx(2 / 3) and result["AP50:95"] == pytest.approx(2 / 3)


def test_iou_of_0_62_counts_at_three_of_ten_thresholds():
    truth = [_det([[0, 0, 10, 10]])]
    found = [_det([[0, 0, 10, 6.2]])]  # IoU 0.62: a hit at 0.50, 0.55, 0.60 only
    result = average_precision(found, truth)
    assert result["AP50"] == 1.0 and result["AP50:95"] == pytest.approx(0.3)


def test_half_recall_gives_about_half_ap():
    # one of two boxes found: precision 1 for recall points 0..0.5 (51 of 101), 0 above
    truth = [_det([[0, 0, 10, 10], [20, 20, 30, 30]])]
    found = [_det([[0, 0, 10, 10]])]
    assert average_precision(found, truth)["AP50"] == pytest.approx(51 / 101)


def test_classes_must_agree_and_count_separately():
    truth = [_det([[0, 0, 10, 10], [20, 20, 30, 30]], classes=[0, 1])]
    found = [_det([[0, 0, 10, 10], [20, 20, 30, 30]], classes=[0, 2])]
    result = average_precision(found, truth)
    assert result["AP50"] == pytest.approx(0.5) and result["classes"] == 2


def test_detections_merge_across_images_by_score():
    # image 0: TP at 0.9; image 1: FP at 0.8, TP at 0.7 -> precision 1, 1/2, 2/3 at recall
    # 1/2, 1/2, 1 -> envelope 1 up to recall 1/2, 2/3 above -> (51 * 1 + 50 * 2/3) / 101
    truth = [_det([[0, 0, 10, 10]]), _det([[0, 0, 10, 10]])]
    found = [_det([[0, 0, 10, 10]], [0.9]),
             _det([[50, 50, 60, 60], [0, 0, 10, 10]], [0.8, 0.7])]
    expected = (51 + 50 * 2 / 3) / 101
    assert average_precision(found, truth)["AP50"] == pytest.approx(expected)


def test_no_ground_truth_gives_no_score():
    result = average_precision([_det([[0, 0, 1, 1]])], [_det(np.zeros((0, 4)))])
    assert result["AP50"] is None and result["ground_truth_boxes"] == 0


def test_decode_yolov5_and_yolov8_layouts():
    # YOLOv5 [1, N, 5 + C]: score = obj * cls; boxes xywh -> xyxy; thin boxes dropped (min_wh 2)
    v5 = np.zeros((1, 10, 5 + 2))  # N > 5 + C tells the layouts apart
    v5[0, 0] = [50, 50, 20, 10, 0.9, 0.2, 0.8]
    v5[0, 1] = [10, 10, 1.0, 30, 0.9, 0.9, 0.1]  # 1 px wide: dropped
    v5[0, 2] = [80, 80, 10, 10, 0.1, 0.5, 0.5]  # score 0.05: under the threshold
    [image] = decode_yolo(v5, conf_threshold=0.25)
    np.testing.assert_allclose(image.boxes, [[40, 45, 60, 55]])
    assert image.scores.tolist() == pytest.approx([0.72]) and image.classes.tolist() == [1]
    # YOLOv8 [1, 4 + C, N] (told from YOLOv5 by N > 4 + C)
    v8 = np.zeros((1, 4 + 2, 10))
    v8[0, :, 0] = [50, 50, 20, 10, 0.3, 0.6]
    [image] = decode_yolo(v8, conf_threshold=0.25)
    np.testing.assert_allclose(image.boxes, [[40, 45, 60, 55]])
    assert image.classes.tolist() == [1] and image.scores.tolist() == pytest.approx([0.6])
