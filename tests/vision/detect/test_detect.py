"""YOLO decodes on hand-made outputs (v5, v8, the device head) and layout detection."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from edgefuse.errors import InputError
from edgefuse.optimize.append_yolo_head import YoloHeadOptions, append_yolo_head
from edgefuse.preprocess import Geometry
from edgefuse.vision.detect import heads, nms_free, paddle_heads
from edgefuse.vision.detect.decode import (
    DetectOptions,
    candidates_yolov5,
    candidates_yolov8,
    decode,
)
from edgefuse.vision.model.layouts import detect_layout
from tests.vision.models import constant_model, yolov8_output

pytestmark = pytest.mark.ort

IDENTITY = Geometry((32, 32), (32, 32), 1.0, 1.0, 0, 0)
# A 50 x 100 frame letterboxed into 32 x 32: r = 0.32, content 32 x 16, 8 rows above.
WIDE = Geometry((50, 100), (32, 32), 0.32, 0.32, 0, 8)


def test_yolov8_keeps_scores_strictly_above_conf_and_takes_the_best_class():
    out = np.zeros((1, 6, 4), np.float32)
    out[0, :4] = [[10, 20, 30, 5], [10, 20, 30, 5], [4, 4, 4, 2], [2, 2, 2, 2]]  # cx cy w h rows
    out[0, 4:, 0] = [0.25, 0.1]  # exactly conf: dropped
    out[0, 4:, 1] = [0.3, 0.6]  # class 1 wins
    out[0, 4:, 2] = [0.9, 0.0]
    boxes, scores, classes = candidates_yolov8(out, 0.25)
    np.testing.assert_allclose(boxes, [[18, 19, 22, 21], [28, 29, 32, 31]])
    np.testing.assert_allclose(scores, [0.6, 0.9])
    assert classes.tolist() == [1, 0]


def test_yolov5_score_is_objectness_times_class():
    out = np.zeros((1, 3, 7), np.float32)
    out[0, 0] = [16, 16, 8, 8, 0.9, 0.2, 0.5]  # 0.9 x 0.5 = 0.45, class 1
    out[0, 1] = [8, 8, 4, 4, 0.3, 0.9, 0.1]  # 0.27: kept
    out[0, 2] = [4, 4, 2, 2, 0.2, 1.0, 1.0]  # objectness 0.2 <= conf: never a candidate
    boxes, scores, classes = candidates_yolov5(out, 0.25)
    np.testing.assert_allclose(boxes, [[12, 12, 20, 20], [6, 6, 10, 10]])
    np.testing.assert_allclose(scores, [0.45, 0.27], rtol=1e-6)
    assert classes.tolist() == [1, 0]
    out[0, 0, 6] = 0.2  # 0.9 x 0.2 = 0.18 <= conf: dropped although objectness passed
    assert len(candidates_yolov5(out, 0.25)[1]) == 1


def test_yolov8_decode_runs_class_aware_nms_and_maps_back_through_the_letterbox():
    result = decode({"output0": yolov8_output()}, "yolov8", WIDE)
    # Box 0 (8, 8)-(24, 24) in the model: x / 0.32, (y - 8) / 0.32 -> (25, 0)-(75, 50);
    # box 1 is suppressed by box 0; box 2 (2, 2)-(6, 6) is clipped to y >= 0.
    np.testing.assert_allclose(result.boxes, [[25, 0, 75, 50], [6.25, 0, 18.75, 0]], atol=1e-4)
    np.testing.assert_allclose(result.scores, [0.9, 0.7])
    assert result.classes.tolist() == [0, 1]


def test_class_filter_agnostic_nms_and_max_det():
    out = yolov8_output()
    out[0, 4, 1], out[0, 5, 1] = 0.0, 0.8  # box 1 becomes class 1
    both = decode({"o": out}, "yolov8", IDENTITY)
    assert both.classes.tolist() == [0, 1, 1]
    agnostic = decode({"o": out}, "yolov8", IDENTITY, DetectOptions(agnostic=True))
    assert agnostic.scores.tolist() == pytest.approx([0.9, 0.7])
    only_1 = decode({"o": out}, "yolov8", IDENTITY, DetectOptions(classes=(1,)))
    assert only_1.classes.tolist() == [1, 1]
    assert len(decode({"o": out}, "yolov8", IDENTITY, DetectOptions(max_det=1))) == 1


def test_empty_outputs_give_no_detections():
    result = decode({"o": np.zeros((1, 6, 64), np.float32)}, "yolov8", IDENTITY)
    assert result.boxes.shape == (0, 4) and len(result) == 0


def test_yolo_head_rows_past_num_detections_are_ignored():
    outputs = {
        "boxes": np.array([[[8, 16, 24, 24], [2, 10, 6, 14], [9, 9, 9, 9]]], np.float32),
        "scores": np.array([[0.9, 0.3, 0.0]], np.float32),
        "classes": np.array([[1, 0, 0]], np.int32),
        "num_detections": np.array([2], np.int32),
    }
    result = decode(outputs, "yolo_head", WIDE)
    np.testing.assert_allclose(result.boxes, [[25, 25, 75, 50], [6.25, 6.25, 18.75, 18.75]])
    assert result.classes.tolist() == [1, 0]
    stricter = decode(outputs, "yolo_head", WIDE, DetectOptions(conf=0.5))
    assert len(stricter) == 1
    with pytest.raises(InputError, match="not a YoloHead"):
        decode({"boxes": outputs["boxes"]}, "yolo_head", WIDE)


def _disjoint_yolov8(scores):
    """A yolov8 output [1, 5, N]: one class, N disjoint 4 x 4 boxes with these scores."""
    out = np.zeros((1, 5, len(scores)), np.float32)
    out[0, 0] = 4 + 8 * np.arange(len(scores))  # cx
    out[0, 1], out[0, 2], out[0, 3] = 4, 4, 4  # cy, w, h
    out[0, 4] = scores
    return out


def test_more_candidates_than_max_nms_keeps_the_best_scores():
    out = _disjoint_yolov8([0.3, 0.9, 0.5, 0.8, 0.4])
    everything = decode({"o": out}, "yolov8", IDENTITY)
    assert everything.scores.tolist() == pytest.approx([0.9, 0.8, 0.5, 0.4, 0.3])
    best_two = decode({"o": out}, "yolov8", IDENTITY, DetectOptions(max_nms=2))
    assert best_two.scores.tolist() == pytest.approx([0.9, 0.8])
    np.testing.assert_allclose(best_two.boxes, [[10, 2, 14, 6], [26, 2, 30, 6]])


def _head(scores, classes):
    count = len(scores)
    boxes = np.array([[[4 * i, 0, 4 * i + 2, 2] for i in range(count)]], np.float32)
    return {"boxes": boxes, "scores": np.array([scores], np.float32),
            "classes": np.array([classes], np.int32), "num_detections": np.array([count],
                                                                              np.int32)}


def test_yolo_head_drops_a_score_equal_to_conf():
    result = decode(_head([0.9, 0.25, 0.2500001], [0, 0, 0]), "yolo_head", IDENTITY,
                    DetectOptions(conf=0.25))
    assert result.scores.tolist() == pytest.approx([0.9, 0.2500001])


def test_yolo_head_keeps_the_classes_asked_for_and_at_most_max_det():
    outputs = _head([0.9, 0.8, 0.7, 0.6], [2, 0, 2, 1])
    only_2 = decode(outputs, "yolo_head", IDENTITY, DetectOptions(classes=(2,)))
    assert only_2.classes.tolist() == [2, 2]
    assert only_2.scores.tolist() == pytest.approx([0.9, 0.7])
    np.testing.assert_allclose(only_2.boxes, [[0, 0, 2, 2], [8, 0, 10, 2]])
    two_classes = decode(outputs, "yolo_head", IDENTITY, DetectOptions(classes=(0, 1)))
    assert two_classes.classes.tolist() == [0, 1]
    first_two = decode(outputs, "yolo_head", IDENTITY, DetectOptions(max_det=2))
    assert first_two.scores.tolist() == pytest.approx([0.9, 0.8])
    assert first_two.classes.tolist() == [2, 0]


@pytest.mark.parametrize("layout", ["yolov8", "yolov5"])
def test_the_device_head_agrees_with_the_host_decode(layout):
    """edgefuse's YoloHead op (run as its ONNX function) and the host decode, same output."""
    rng = np.random.default_rng(3)
    raw = np.zeros((1, 7, 200), np.float32)
    raw[0, :2] = rng.uniform(4, 28, (2, 200))
    raw[0, 2:4] = rng.uniform(2, 12, (2, 200))
    raw[0, 4:] = rng.random((3, 200)) ** 3
    if layout == "yolov5":
        raw = np.ascontiguousarray(raw[:, :7].transpose(0, 2, 1))  # obj + 2 classes
    model = append_yolo_head(constant_model(raw), YoloHeadOptions(layout=layout))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    head = dict(zip(names, session.run(None, {"images": np.zeros((1, 3, 32, 32), np.float32)}),
                    strict=True))
    on_device = decode(head, "yolo_head", IDENTITY)
    on_host = decode({"output0": raw}, layout, IDENTITY)
    assert len(on_host) > 3
    np.testing.assert_allclose(on_device.boxes, on_host.boxes, atol=1e-4)
    np.testing.assert_allclose(on_device.scores, on_host.scores, rtol=1e-6)
    assert on_device.classes.tolist() == on_host.classes.tolist()


@pytest.mark.parametrize(("outputs", "classes", "layout"), [
    ([("o", (1, 84, 8400), "float32")], None, "yolov8"),
    ([("o", (1, 25200, 85), "float32")], None, "yolov5"),
    ([("o", (1, 6, 4), "float32")], 2, "yolov8"),  # N < 4 + C: only the class count tells
    ([("o", (1, 4, 7), "float32")], 2, "yolov5"),
    ([("b", (1, 300, 4), "float32"), ("s", (1, 300), "float32"), ("c", (1, 300), "int32"),
      ("n", (1,), "int32")], None, "yolo_head"),
    ([("o", (1, 21, 64, 64), "float32")], None, "seg_logits"),
    ([("o", (1, 1, 64, 64), "float32")], None, "seg_sigmoid"),
    ([("o", (1, 64, 64), "int64")], None, "seg_argmax"),
    ([("o", (1, 1000), "float32")], None, "logits"),
    ([("o", (1, "n", 85), "float32")], None, None),
])
def test_layout_from_output_shapes(outputs, classes, layout):
    assert detect_layout(outputs, classes) == layout


def test_yolox_decodes_cells_and_runs_its_plus_one_pixel_class_agnostic_nms():
    """Two 4 x 4 boxes 1.8 px apart: IoU 0.38 plainly, 0.47 as YOLOX's demo nms measures it
    ((x2 - x1 + 1) x (y2 - y1 + 1)), so YOLOX keeps one of them at 0.45, though of two classes."""
    raw = np.zeros((1, 525, 7), np.float32)  # 160 x 160 at strides 8, 16, 32; 2 classes
    raw[0, :, 2:4] = -5.0  # tiny boxes elsewhere, scores 0
    raw[0, 0] = [0.25, 0.25, np.log(0.5), np.log(0.5), 1.0, 0.9, 0.0]  # cell (0, 0): (0,0)-(4,4)
    raw[0, 1] = [3.8 / 8 - 1, 0.25, np.log(0.5), np.log(0.5), 1.0, 0.0, 0.8]  # cell (1, 0)
    identity = Geometry((160, 160), (160, 160), 1.0, 1.0, 0, 0)
    result = decode({"output": raw}, "yolox", identity)
    np.testing.assert_allclose(result.boxes, [[0, 0, 4, 4]], atol=1e-5)
    assert result.classes.tolist() == [0]
    both = decode({"output": raw}, "yolox", identity, DetectOptions(agnostic=False))
    assert both.classes.tolist() == [0, 1]  # class-aware: each class its own NMS


# ---- the ranking inside the decoders (hand-computed) -------------------------------------------


def test_detr_top_k_comes_sorted_by_score_best_first():
    """3 queries x 2 classes; scores flattened query-major: the best ``top`` pairs, best first,
    whether the top-k is a partition (top < 6) or every pair (top >= 6)."""
    scores = np.array([[[0.2, 0.9], [0.6, 0.1], [0.95, 0.3]]], np.float32)
    boxes = np.array([[[0.5, 0.5, 0.2, 0.2], [0.25, 0.25, 0.1, 0.1], [0.75, 0.5, 0.5, 0.4]]],
                     np.float32)
    _, top_scores, labels = nms_free.detr_top(boxes, scores, (100, 200), logits=False,
                                              conf=0.15, top=10)
    np.testing.assert_allclose(top_scores, [0.95, 0.9, 0.6, 0.3, 0.2])
    assert labels.tolist() == [0, 1, 0, 1, 0]
    xyxy, top_scores, labels = nms_free.detr_top(boxes, scores, (100, 200), logits=False,
                                                 conf=0.15, top=2)
    np.testing.assert_allclose(top_scores, [0.95, 0.9])
    # query 2 (cx 0.75, cy 0.5, w 0.5, h 0.4 of 200 x 100) then query 0
    np.testing.assert_allclose(xyxy, [[100, 30, 200, 70], [80, 40, 120, 60]])


def test_picodet_keeps_the_best_scoring_cells_of_a_stride_when_more_pass_than_its_top_k():
    """320 x 320 at stride 8: 1600 cells, all above conf, cell i scoring 0.5 + i / 4000:
    PicoDetPostProcess keeps the 1000 best (cells 600 .. 1599), never the 1000 lowest."""
    cells = 1600
    assert cells > paddle_heads.NMS_TOP_K == 1000
    best = 0.5 + np.arange(cells, dtype=np.float32) / 4000
    scores = np.stack([best, np.zeros(cells, np.float32)], axis=1)[None]
    distributions = np.zeros((1, cells, 4 * 8), np.float32)  # reg_max 7, uniform bins: 3.5
    boxes, kept = paddle_heads.pico_scores([scores], [distributions], [8], (320, 320), 0.3)
    assert len(kept) == 1000
    np.testing.assert_allclose(np.sort(kept[:, 0]), best[600:])
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    expected = heads.pico_centres((320, 320), 8)[600:]
    assert sorted(map(tuple, centres.tolist())) == sorted(map(tuple, expected.tolist()))
    np.testing.assert_allclose(boxes[:, 2:] - boxes[:, :2], 2 * 3.5 * 8)
