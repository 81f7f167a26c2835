"""The graph rewrites that put custom ops into models: silu-to-swish and append_yolo_head.

silu-to-swish runs in the Ascend pipeline only; its results must compute what the SiLU nodes
computed (checked on ONNX Runtime, which runs the attached Swish functions), and its refusals
must say why. append_yolo_head is opt-in; a model it touched returns the detections the numpy
reference computes from the model's raw output.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from edgefuse import model_info
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, Postprocess
from edgefuse.optimize import optimize
from edgefuse.optimize.append_yolo_head import YoloHeadOptions, append_yolo_head
from tests.acl.ops.ops_testing import run_ort
from tests.optimize.graphs import (
    assert_fired,
    assert_refused,
    expose_as_input,
    make_model,
    node,
    op_types,
    random,
    rewrite_alone,
)

pytestmark = pytest.mark.ort

SOC = "Ascend310B4"


def conv_silu(gate_nodes, extra=None, inputs=None):
    """Conv -> ``gate_nodes`` (which compute 'y' from 'c') with a 3x3 conv in front."""
    rng = np.random.default_rng(0)
    weights = {"w": random(rng, 4, 3, 3, 3), **(extra or {})}
    return make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), *gate_nodes],
        {"x": [1, 3, 8, 8], **(inputs or {})},
        ["y"],
        weights,
    )


def ascend(model, *rule_ids):
    return optimize(model, target=SOC, only=list(rule_ids))


def swish_alphas(model):
    return [
        onnx.helper.get_attribute_value(a)
        for n in model.graph.node
        if n.domain == "edgefuse"
        for a in n.attribute
        if a.name == "alpha"
    ]


def assert_same_numbers(before, after):
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run_ort(after, {"x": x})[0], run_ort(before, {"x": x})[0],
                               rtol=1e-5, atol=2e-6)


# ---- silu-to-swish ---------------------------------------------------------------------------


def test_silu_and_scaled_silu_become_swish_in_either_operand_order():
    model = conv_silu(
        [
            node("Sigmoid", ["c"], ["s"], name="sig"),
            node("Mul", ["s", "c"], ["h"], name="silu"),  # commuted: Sigmoid output first
            node("Mul", ["k", "h"], ["t"], name="scale"),  # commuted: constant first
            node("Sigmoid", ["t"], ["s2"], name="sig2"),
            node("Mul", ["h", "s2"], ["y"], name="gelu_approx"),
        ],
        {"k": np.array(1.702, np.float32)},
    )
    result = ascend(model, "silu-to-swish")
    assert_fired(result, "silu-to-swish", gone=["Sigmoid", "Mul"],
                 tagged={"silu": "silu-to-swish", "gelu_approx": "silu-to-swish"})
    assert op_types(result.model)["Swish"] == 2
    assert swish_alphas(result.model) == pytest.approx([1.0, 1.702])
    assert [f.name for f in result.model.functions] == ["Swish"]
    assert_same_numbers(model, result.model)


def test_gating_by_another_tensor_is_refused_with_the_reason():
    model = conv_silu([node("Sigmoid", ["x2"], ["s"], name="sig"),
                       node("Mul", ["c", "s"], ["y"], name="gate")], inputs={"x2": [1, 4, 8, 8]})
    result = ascend(model, "silu-to-swish")
    assert_refused(result, "silu-to-swish", "neither x nor x times a constant", "gate")
    assert op_types(result.model)["Sigmoid"] == 1


def test_a_per_channel_scale_inside_the_sigmoid_is_refused_with_the_reason():
    model = conv_silu(
        [
            node("Mul", ["c", "k"], ["t"], name="scale"),
            node("Sigmoid", ["t"], ["s"], name="sig"),
            node("Mul", ["c", "s"], ["y"], name="silu"),
        ],
        {"k": np.arange(1, 5, dtype=np.float32).reshape(4, 1, 1)},
    )
    result = ascend(model, "silu-to-swish")
    assert_refused(result, "silu-to-swish", r"shape \[4, 1, 1\]; only a scalar", "silu")


def test_a_sigmoid_read_elsewhere_is_refused_with_the_reason():
    model = conv_silu([node("Sigmoid", ["c"], ["s"], name="sig"),
                       node("Mul", ["c", "s"], ["y"], name="silu")])
    model.graph.output.append(onnx.helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, None))
    result = ascend(model, "silu-to-swish")
    assert_refused(result, "silu-to-swish", r"consumers outside the pattern", "silu")
    assert op_types(result.model)["Sigmoid"] == 1
    assert_same_numbers(model, result.model)


def scaled_silu(**model):
    """``c * sigmoid(c * k)``; ``k`` as ``model`` says (an initializer, or a graph input)."""
    return conv_silu(
        [
            node("Mul", ["c", "k"], ["t"], name="scale"),
            node("Sigmoid", ["t"], ["s"], name="sig"),
            node("Mul", ["c", "s"], ["y"], name="silu"),
        ],
        **model,
    )


def test_a_scale_fed_at_run_time_is_refused_with_the_reason():
    model = scaled_silu(inputs={"k": []})
    result = ascend(model, "silu-to-swish")
    assert_refused(result, "silu-to-swish", r"the scale 'k' inside the sigmoid is not constant",
                   "silu")
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             "k": np.array(1.702, np.float32)}
    np.testing.assert_allclose(run_ort(result.model, feeds)[0], run_ort(model, feeds)[0],
                               rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("apply", [ascend, rewrite_alone], ids=["pipeline", "rule-alone"])
def test_a_scale_the_caller_can_override_is_refused_with_the_reason(apply):
    model = expose_as_input(scaled_silu(extra={"k": np.array(1.702, np.float32)}), "k")
    result = apply(model, "silu-to-swish")
    assert_refused(result, "silu-to-swish", r"the scale 'k' inside the sigmoid is not constant",
                   "silu")
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             "k": np.array(0.5, np.float32)}
    np.testing.assert_allclose(run_ort(result.model, feeds)[0], run_ort(model, feeds)[0],
                               rtol=1e-5, atol=2e-6)


def test_host_targets_do_not_run_the_ascend_rules():
    model = conv_silu([node("Sigmoid", ["c"], ["s"], name="sig"),
                       node("Mul", ["c", "s"], ["y"], name="silu")])
    result = optimize(model, target="cpu")
    assert "silu-to-swish" not in result.report.rules
    assert op_types(result.model)["Sigmoid"] == 1 and not result.model.functions


def test_an_ambiguous_ascend_target_is_a_user_error():
    with pytest.raises(InputError, match="unknown soc 'ascend310b'"):
        optimize(conv_silu([node("Relu", ["c"], ["y"])]), target="ascend310b")


# ---- append_yolo_head --------------------------------------------------------------------------

CLASSES, BOXES = 3, 64


def yolov8_model():
    """raw [1, 4 + C, N] -> boxes scaled to pixels, class logits through a sigmoid: v8 layout."""
    return make_model(
        [
            node("Slice", ["raw", "zero", "four", "one"], ["xywh_raw"]),
            node("Mul", ["xywh_raw", "pixels"], ["xywh"]),
            node("Slice", ["raw", "four", "end", "one"], ["logits"]),
            node("Sigmoid", ["logits"], ["probs"]),
            node("Concat", ["xywh", "probs"], ["output0"], axis=1),
        ],
        {"raw": [1, 4 + CLASSES, BOXES]},
        ["output0"],
        {
            "zero": np.array([0]), "four": np.array([4]), "one": np.array([1]),
            "end": np.array([100]), "pixels": np.array(16.0, np.float32),
        },
    )


def raw_input(rows):
    return {"raw": np.random.default_rng(2).standard_normal((1, rows, BOXES)).astype(np.float32)}


def test_append_yolo_head_to_a_yolov8_output_returns_the_reference_detections():
    model = yolov8_model()
    options = YoloHeadOptions(score_threshold=0.6, iou_threshold=0.5, max_detections=12)
    headed = append_yolo_head(model, options)
    onnx.checker.check_model(headed, full_check=True)
    assert [o.name for o in headed.graph.output] == list(
        ("boxes", "scores", "classes", "num_detections")
    )
    assert [d.dim_value for d in headed.graph.output[0].type.tensor_type.shape.dim] == [1, 12, 4]
    feeds = raw_input(4 + CLASSES)
    (raw_output,) = run_ort(model, feeds)
    want = YOLO_HEAD.reference([raw_output], num_classes=CLASSES, score_threshold=0.6,
                               iou_threshold=0.5, max_detections=12)
    got = run_ort(headed, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert 0 < got[3][0] <= 12


def test_append_yolo_head_transposes_a_yolov5_output_and_keeps_it_on_request():
    model = make_model(
        [node("Sigmoid", ["raw"], ["output0"])], {"raw": [1, BOXES, 5 + CLASSES]}, ["output0"]
    )
    headed = append_yolo_head(model, YoloHeadOptions(keep_predictions=True, max_detections=5))
    assert op_types(headed)["Transpose"] == 1
    (yolo,) = [n for n in headed.graph.node if n.op_type == "YoloHead"]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in yolo.attribute}["objectness"] == 1
    assert [o.name for o in headed.graph.output][0] == "output0"
    feeds = {"raw": np.random.default_rng(3).standard_normal((1, BOXES, 8)).astype(np.float32)}
    raw_output, *got = run_ort(headed, feeds)
    want = YOLO_HEAD.reference([raw_output.transpose(0, 2, 1)], num_classes=CLASSES,
                               objectness=1, max_detections=5)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_append_yolo_head_makes_the_carried_app_info_read_the_heads_rows():
    """optimize --yolo-head on a model whose app info says yolov8: the app must read the op's
    rows afterwards (it refused the four outputs as yolov8's); the rest of the info stays."""
    info = AppInfo(task="detect", classes=("a", "b", "c"),
                   postprocess=Postprocess(layout="yolov8", conf=0.3, iou=0.5, max_det=50))
    headed = model_info.from_onnx(append_yolo_head(model_info.embed(yolov8_model(), info)))
    assert headed.postprocess.layout == "yolo_head"
    assert headed.classes == info.classes and headed.task == "detect"
    assert (headed.postprocess.conf, headed.postprocess.iou, headed.postprocess.max_det) == (
        0.3, 0.5, 50)
    assert model_info.from_onnx(append_yolo_head(yolov8_model())) is None  # none added


def test_append_yolo_head_refuses_what_it_cannot_read():
    square = make_model([node("Sigmoid", ["raw"], ["out"])], {"raw": [1, 9, 9]}, ["out"])
    with pytest.raises(InputError, match="cannot tell whether output 'out'"):
        append_yolo_head(square)
    with pytest.raises(InputError, match="the model has no output 'nope'"):
        append_yolo_head(square, YoloHeadOptions(output="nope"))
    with pytest.raises(InputError, match="unknown YOLO layout 'yolov7'"):
        append_yolo_head(square, YoloHeadOptions(layout="yolov7"))
