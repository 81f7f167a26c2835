"""The kit's assertions pass on agreement and fail with messages that say which output, where and
by how much; detections and masks likewise."""

import re

import numpy as np
import pytest

from edgefuse.metrics.detect import Detections
from edgefuse.testing import (
    OutputGate,
    assert_detections_match,
    assert_masks_match,
    assert_outputs_close,
)
from edgefuse.vision.segment.decode import Segmentation

pytestmark = pytest.mark.unit

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((1, 10)).astype(np.float32) * 4
FEATURES = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)


def _fp16(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float16).astype(np.float32)


# --- outputs -----------------------------------------------------------------------------------

def test_outputs_within_the_gate_pass():
    assert_outputs_close({"logits": LOGITS}, {"logits": LOGITS})
    assert_outputs_close({"logits": _fp16(LOGITS), "features": FEATURES},
                         {"logits": LOGITS, "features": FEATURES}, fp16=True)
    # float16 arrays choose the FP16 gate by themselves
    assert_outputs_close({"logits": LOGITS.astype(np.float16)}, {"logits": LOGITS})
    # a list of samples, an extra output in the actual is fine
    assert_outputs_close([{"logits": LOGITS, "more": LOGITS}] * 2, [{"logits": LOGITS}] * 2)


def test_fp16_rounding_fails_the_fp32_gate_naming_the_worst_element():
    with pytest.raises(AssertionError) as caught:
        assert_outputs_close({"logits": _fp16(LOGITS)}, {"logits": LOGITS})
    worst = int(np.argmax(np.abs(_fp16(LOGITS) - LOGITS)))
    message = str(caught.value)
    assert message.startswith("outputs differ (cosine >= 0.99999 and max abs error <= 0.0001 x "
                              "max|expected|):")
    assert re.search(rf"output 'logits': max abs error [\d.e-]+ > [\d.e-]+; worst at \[0, "
                     rf"{worst}\]: actual {_fp16(LOGITS)[0, worst]:.6g}, expected "
                     rf"{LOGITS[0, worst]:.6g}", message), message


def test_a_wrong_output_fails_on_cosine_and_max_abs_with_both_figures():
    wrong = LOGITS.copy()
    wrong[0, 3] += 5.0
    with pytest.raises(AssertionError, match=r"output 'logits': cosine 0\.\d+ < 0\.999; max abs "
                                             r"error 5 > 0\.\d+; worst at \[0, 3\]"):
        assert_outputs_close({"logits": wrong}, {"logits": LOGITS}, fp16=True)


def test_absolute_and_cosine_gates_can_be_given():
    off = LOGITS + 0.05
    assert_outputs_close({"logits": off}, {"logits": LOGITS}, min_cosine=0.99,
                         max_abs_error=0.06)
    with pytest.raises(AssertionError, match=r"\(cosine >= 0\.99 and max abs error <= 0\.04\)"):
        assert_outputs_close({"logits": off}, {"logits": LOGITS}, min_cosine=0.99,
                             max_abs_error=0.04)


def test_missing_outputs_shapes_samples_and_nan_are_named():
    with pytest.raises(AssertionError, match=r"output\(s\) 'features' missing; actual has "
                                             r"\['logits'\]"):
        assert_outputs_close({"logits": LOGITS}, {"logits": LOGITS, "features": FEATURES})
    with pytest.raises(AssertionError, match=r"output 'logits': shape \[10\], expected \[1, 10\]"):
        assert_outputs_close({"logits": LOGITS[0]}, {"logits": LOGITS})
    nan = LOGITS.copy()
    nan[0, 7] = np.nan
    with pytest.raises(AssertionError, match=r"sample 1: output 'logits': 1 NaN or infinite "
                                             r"value\(s\) without agreement, the first at "
                                             r"\[0, 7\]: actual nan"):
        assert_outputs_close([{"logits": LOGITS}, {"logits": nan}], [{"logits": LOGITS}] * 2)
    with pytest.raises(AssertionError, match="1 actual sample"):
        assert_outputs_close([{"logits": LOGITS}], [{"logits": LOGITS}] * 2)
    ids = np.array([[1, 2, 3]])  # integers must be equal, whatever the gate
    assert_outputs_close({"ids": ids.astype(np.int32)}, {"ids": ids}, min_cosine=0.5)
    with pytest.raises(AssertionError, match=r"output 'ids': 1 element\(s\) differ, the first "
                                             r"at \[0, 1\]: 3, expected 2"):
        assert_outputs_close({"ids": ids + np.array([[0, 1, 0]])}, {"ids": ids}, min_cosine=0.5)


def test_the_max_abs_gate_scales_with_the_reference():
    gate = OutputGate.default(fp16=True)
    assert gate.limit(np.array([-200.0, 3.0])) == pytest.approx(2.0)
    assert OutputGate.default(fp16=False, max_abs_error=0.5).limit(np.array([1e6])) == 0.5


def test_the_max_abs_limit_comes_from_the_expected_values_not_the_actual():
    """FP16 gate: 1e-2 x max|expected|. An actual peak of 100 against an expected 99 is 1.0 off,
    over 0.99 (the expected's limit) though within 1.0 (what the actual's peak would allow); the
    other way round, 99 against 100 is within the expected's 1.0."""
    ones = np.ones(64, np.float32)
    high, low = ones.copy(), ones.copy()
    high[0], low[0] = 100.0, 99.0
    with pytest.raises(AssertionError, match=r"output 'y': max abs error 1 > 0\.99;"):
        assert_outputs_close({"y": high}, {"y": low}, fp16=True)
    assert_outputs_close({"y": low}, {"y": high}, fp16=True)


# --- detections --------------------------------------------------------------------------------

def _dets(boxes, classes, scores=None) -> Detections:
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    scores = np.asarray(scores if scores is not None else np.linspace(0.9, 0.5, len(boxes)),
                        np.float32)
    return Detections(boxes, scores, np.asarray(classes, np.int64))


BOXES = [[10, 10, 50, 60], [100, 40, 180, 120], [30, 200, 90, 260]]


def test_detections_that_agree_pass_in_any_order():
    expected = _dets(BOXES, [0, 2, 2])
    jittered = np.asarray(BOXES, np.float32)[::-1] + 1.5
    assert_detections_match(_dets(jittered, [2, 2, 0], [0.5, 0.7, 0.9]), expected, iou=0.8)
    assert_detections_match(_dets([], []), _dets([], []))


def test_a_missing_box_is_listed_with_its_class_box_score_and_best_overlap():
    expected = _dets(BOXES, [0, 2, 2], [0.9, 0.8, 0.61])
    actual = _dets([BOXES[0], BOXES[1], [30, 230, 90, 290]], [0, 2, 2])
    with pytest.raises(AssertionError) as caught:
        assert_detections_match(actual, expected, iou=0.5,
                                class_names=["person", "bicycle", "car"])
    lines = str(caught.value).splitlines()
    assert lines[0] == ("detections differ (IoU >= 0.5, same class): 3 actual vs 3 expected, "
                        "2 matched")
    assert lines[1] == ("  missing: expected #2 class 2 'car' box [30.0, 200.0, 90.0, 260.0] "
                        "score 0.610; best actual overlap #2 class 2 'car' box [30.0, 230.0, "
                        "90.0, 290.0] score 0.500 at IoU 0.333")
    assert lines[2].startswith("  extra: actual #2 class 2 'car' box [30.0, 230.0, 90.0, 290.0]")


def test_a_box_of_another_class_does_not_match_unless_classes_are_ignored():
    expected, actual = _dets(BOXES[:1], [0]), _dets(BOXES[:1], [5])
    with pytest.raises(AssertionError, match=r"missing: expected #0 class 0 .* best actual "
                                             r"overlap #0 class 5 .* at IoU 1\.000"):
        assert_detections_match(actual, expected)
    assert_detections_match(actual, expected, classes=False)


def test_extra_and_missing_boxes_are_counted_when_many():
    expected = _dets([[i * 20, 0, i * 20 + 10, 10] for i in range(8)], [1] * 8)
    with pytest.raises(AssertionError, match=r"0 actual vs 8 expected, 0 matched") as caught:
        assert_detections_match(_dets([], []), expected)
    assert "no actual boxes at all" in str(caught.value)
    assert str(caught.value).endswith("... and 3 more")


# --- masks ---------------------------------------------------------------------------------------

MAP = np.zeros((20, 30), np.uint8)
MAP[2:10, 3:15] = 1
MAP[12:18, 20:28] = 2


def test_masks_that_agree_pass():
    assert_masks_match(MAP, MAP)
    nearly = MAP.copy()
    nearly[2, 3] = 0
    assert_masks_match(Segmentation(nearly, 3), Segmentation(MAP, 3), min_mean_iou=0.99)


def test_masks_that_differ_report_mean_iou_worst_classes_and_the_first_pixel():
    shifted = np.zeros_like(MAP)
    shifted[2:10, 9:21] = 1  # class 1 moved 6 px right: IoU 6/18 with itself
    shifted[12:18, 20:28] = 2
    with pytest.raises(AssertionError) as caught:
        assert_masks_match(shifted, MAP, min_mean_iou=0.9)
    lines = str(caught.value).splitlines()
    assert re.match(r"masks differ: mean IoU 0\.\d{4} < 0\.9 \(pixel agreement \d+\.\d\d%, 3 "
                    r"class\(es\) present\)", lines[0]), lines[0]
    assert lines[1] == "  class 1: IoU 0.3333 (expected 96 px, actual 96 px, 48 shared)"
    assert lines[-1] == ("  96 pixel(s) differ, the first at [2, 3] (y, x): actual 0, "
                         "expected 1")


def test_mask_shapes_and_dtypes_are_checked():
    with pytest.raises(AssertionError, match=r"masks differ: shape \[20, 29\], expected "
                                             r"\[20, 30\]"):
        assert_masks_match(MAP[:, 1:], MAP)
    with pytest.raises(TypeError, match="integer class map"):
        assert_masks_match(MAP.astype(np.float32), MAP)


def test_one_actual_box_cannot_match_two_expected_boxes():
    """Two expected boxes of one class, both over IoU 0.5 with a single actual box: one match,
    the other expected box is missing."""
    expected = _dets([[0, 0, 10, 10], [0, 0, 10, 9]], [1, 1], [0.9, 0.8])
    actual = _dets([[0, 0, 10, 10]], [1])
    with pytest.raises(AssertionError, match=r"1 actual vs 2 expected, 1 matched\n  missing: "
                                             r"expected #1 class 1 box \[0.0, 0.0, 10.0, 9.0\]"):
        assert_detections_match(actual, expected)


def test_a_box_exactly_at_the_iou_threshold_matches():
    """[0, 0, 10, 5] inside [0, 0, 10, 10]: IoU 50 / 100 = 0.5 exactly (in binary too)."""
    expected, actual = _dets([[0, 0, 10, 10]], [0]), _dets([[0, 0, 10, 5]], [0])
    assert_detections_match(actual, expected, iou=0.5)
    with pytest.raises(AssertionError, match="0 matched"):
        assert_detections_match(actual, expected, iou=0.5 + 1e-6)
