"""Each custom op's numpy reference against its ONNX decomposition on ONNX Runtime.

The reference is the definition; the decomposition is what host backends run. They must agree on
random inputs and on the edge cases that break detectors: no detection at all, every box
overlapping, equal scores, more or fewer candidates than output rows. Where the semantics are a
choice (tie order), the expected rows are also written out by hand, so the reference itself is
pinned and not only its agreement with ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.acl.ops.depthwise_conv.spec import DEPTHWISE_CONV
from edgefuse.acl.ops.swish.spec import SWISH
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from tests.acl.ops.ops_testing import run_decomposition

pytestmark = pytest.mark.ort


def assert_same(got, want, *, rtol=0.0, atol=0.0):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if rtol == atol == 0.0:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---- Swish -----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 1.702, 0.5])
def test_swish_matches_reference_on_random_and_extreme_values(alpha):
    rng = np.random.default_rng(1)
    extremes = np.array([-100, -30, -1e-3, 0, 1e-3, 30, 100], np.float32)
    x = np.concatenate([rng.standard_normal(200).astype(np.float32) * 4, extremes]).reshape(3, -1)
    # ONNX Runtime's float32 Sigmoid is a fast approximation: ~1e-6 absolute in the tails
    assert_same(run_decomposition(SWISH, [x], alpha=alpha), SWISH.reference([x], alpha=alpha),
                rtol=1e-5, atol=2e-6)


def test_swish_float16_stays_float16():
    x = (np.random.default_rng(2).standard_normal((2, 3, 4, 5)) * 3).astype(np.float16)
    assert_same(run_decomposition(SWISH, [x]), SWISH.reference([x]), rtol=2e-3, atol=1e-3)


def test_swish_as_a_model_local_function_runs_without_inlining():
    x = np.linspace(-6, 6, 24, dtype=np.float32).reshape(2, 12)
    assert_same(run_decomposition(SWISH, [x], inline=False), SWISH.reference([x]),
                rtol=1e-5, atol=2e-6)


# ---- DepthwiseConv ---------------------------------------------------------------------------

CONV_CASES = [
    dict(shape=(2, 5, 9, 11), kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), bias=True),
    dict(shape=(1, 17, 12, 10), kernel=(3, 3), strides=(2, 2), pads=(0, 1, 2, 1), bias=True,
         dilations=(2, 1)),
    dict(shape=(1, 4, 8, 8), kernel=(5, 5), strides=(1, 2), pads=(2, 2, 2, 2), bias=False),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c["shape"])))
def test_depthwise_conv_matches_reference(case):
    rng = np.random.default_rng(3)
    n, c, h, w = case["shape"]
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weights = rng.standard_normal((c, 1, *case["kernel"])).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32) if case["bias"] else None
    attrs = dict(channels=c, strides=case["strides"], pads=case["pads"],
                 dilations=case.get("dilations", (1, 1)))
    got = run_decomposition(DEPTHWISE_CONV, [x, weights, bias], **attrs)
    want = DEPTHWISE_CONV.reference([x, weights, bias], **attrs)
    assert_same(got, want, rtol=1e-5, atol=1e-5)
    assert got[0].shape == DEPTHWISE_CONV.infer_shapes([x.shape, weights.shape], **attrs)[0]


# ---- YoloHead --------------------------------------------------------------------------------


def predictions(rng, *, batch=1, classes=3, boxes=60, objectness=0, spread=64.0):
    """Channel-major YOLO output: cx, cy, w, h, [objectness], class scores; many overlaps."""
    rows = 4 + objectness + classes
    p = np.empty((batch, rows, boxes), np.float32)
    p[:, 0:2] = rng.uniform(0, spread, (batch, 2, boxes))
    p[:, 2:4] = rng.uniform(2, 24, (batch, 2, boxes))
    p[:, 4:] = rng.random((batch, rows - 4, boxes))
    return p


def head(p, **attrs):
    """(reference, decomposition) outputs for ``p``."""
    return YOLO_HEAD.reference([p], **attrs), run_decomposition(YOLO_HEAD, [p], **attrs)


@pytest.mark.parametrize(
    "attrs",
    [
        dict(objectness=0),
        dict(objectness=1),
        dict(objectness=1, multi_label=1, score_threshold=0.1),
        dict(objectness=0, max_per_class=2, max_detections=7),
        dict(objectness=0, iou_threshold=0.0),
        dict(objectness=0, iou_threshold=1.0, max_detections=500),
    ],
    ids=["v8", "v5", "multi-label", "per-class-cap", "iou-0", "iou-1-padded"],
)
def test_yolo_head_matches_reference_on_random_outputs(attrs):
    rng = np.random.default_rng(4)
    p = predictions(rng, batch=2, objectness=attrs["objectness"])
    want, got = head(p, num_classes=3, **attrs)
    assert_same(got, want)
    assert want[3].min() > 0  # the case exercised detections, not only padding


def test_yolo_head_float16_input_gives_float16_boxes_and_scores():
    p = predictions(np.random.default_rng(5)).astype(np.float16)
    want, got = head(p, num_classes=3)
    assert_same(got, want)
    assert got[0].dtype == got[1].dtype == np.float16
    assert got[2].dtype == got[3].dtype == np.int32


def test_no_score_above_threshold_gives_zero_detections_and_zero_rows():
    p = predictions(np.random.default_rng(6))
    p[:, 4:] = 0.2
    want, got = head(p, num_classes=3, score_threshold=0.25, max_detections=5)
    assert_same(got, want)
    assert got[3].tolist() == [0]
    assert not got[0].any() and not got[1].any() and not got[2].any()


def test_boxes_that_all_overlap_leave_the_best_box_of_each_class():
    p = np.zeros((1, 4 + 2, 6), np.float32)
    p[0, 0:4] = np.array([32, 32, 20, 20], np.float32)[:, None]  # six identical boxes
    p[0, 4] = [0.9, 0.3, 0.8, 0.1, 0.5, 0.2]  # class 0
    p[0, 5] = [0.1, 0.7, 0.2, 0.6, 0.3, 0.4]  # class 1
    want, got = head(p, num_classes=2, max_detections=4)
    assert_same(got, want)
    assert got[3].tolist() == [2]
    np.testing.assert_allclose(got[1][0, :2], [0.9, 0.7])
    assert got[2][0, :2].tolist() == [0, 1]
    np.testing.assert_array_equal(got[0][0, 0], [22, 22, 42, 42])


def test_equal_scores_of_overlapping_boxes_keep_the_lower_box_index():
    p = np.zeros((1, 4 + 1, 3), np.float32)
    p[0, 0:4] = np.array([[40, 41, 10], [40, 40, 10], [10, 10, 4], [10, 10, 4]], np.float32)
    p[0, 4] = 0.6  # boxes 0 and 1 overlap (IoU ~0.8) with equal scores; box 2 is apart
    want, got = head(p, num_classes=1, max_detections=3)
    assert_same(got, want)
    assert got[3].tolist() == [2]
    np.testing.assert_array_equal(got[0][0, 0], [35, 35, 45, 45])  # box 0, not box 1


def test_equal_scores_across_classes_rank_by_box_then_class():
    p = np.zeros((1, 4 + 3, 3), np.float32)
    p[0, 0:4] = np.array([[10, 50, 90], [10, 10, 10], [8, 8, 8], [8, 8, 8]], np.float32)
    p[0, 4:, 0] = [0.0, 0.0, 0.7]  # box 0 -> class 2
    p[0, 4:, 1] = [0.7, 0.0, 0.0]  # box 1 -> class 0
    p[0, 4:, 2] = [0.0, 0.9, 0.0]  # box 2 -> class 1, the best score
    want, got = head(p, num_classes=3, max_detections=4)
    assert_same(got, want)
    assert got[2][0].tolist() == [1, 2, 0, 0]
    assert got[0][0, :3, 0].tolist() == [86, 6, 46]


def test_best_class_ties_go_to_the_lower_class_in_single_label_mode():
    p = np.zeros((1, 4 + 2, 1), np.float32)
    p[0, 0:4, 0] = [5, 5, 4, 4]
    p[0, 4:, 0] = [0.5, 0.5]
    want, got = head(p, num_classes=2, max_detections=2)
    assert_same(got, want)
    assert got[2][0].tolist() == [0, 0] and got[3].tolist() == [1]
    multi, multi_got = head(p, num_classes=2, max_detections=2, multi_label=1)
    assert_same(multi_got, multi)
    assert multi_got[2][0].tolist() == [0, 1] and multi_got[3].tolist() == [2]


def test_fewer_output_rows_than_detections_keeps_the_highest_scores():
    p = predictions(np.random.default_rng(7), boxes=40, spread=400.0)
    want, got = head(p, num_classes=3, max_detections=3, score_threshold=0.05)
    assert_same(got, want)
    assert got[3].tolist() == [3]
    assert np.all(np.diff(got[1][0]) <= 0)
