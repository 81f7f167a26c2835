"""The default keep-FP32 policy: each rule fires where it should and stays quiet where it should."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from edgefuse.quantize.policy import POLICY, policy_decisions, render_policy
from tests.quantize.graphs import make_model, node

pytestmark = pytest.mark.unit


def _decisions(model: onnx.ModelProto) -> dict:
    ir_model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))
    return {name: (d.rule, d.detail) for name, d in policy_decisions(ir_model).items()}


def _reduce(op: str, shape, **attrs) -> onnx.ModelProto:
    return make_model([node(op, ["x"], ["y"], name="reduce", keepdims=1, **attrs)],
                      {"x": shape}, {"y": [shape[0], 1, 1, 1]})


@pytest.mark.parametrize(
    ("op", "shape", "kept"),
    [
        ("ReduceSum", [1, 8, 16, 16], True),  # 2048 > 1024
        ("ReduceSum", [1, 2, 16, 16], False),  # 512
        ("ReduceL2", [1, 8, 16, 16], True),
        ("ReduceMean", [1, 8, 16, 16], False),  # a mean of 2048 stays in range
        ("ReduceMean", [1, 8, 32, 32], True),  # 8192 > 4096
    ],
)
def test_large_reductions_stay_fp32_by_element_count(op, shape, kept):
    decisions = _decisions(_reduce(op, shape))
    assert ("reduce" in decisions) == kept
    if kept:
        assert decisions["reduce"][0] == "large-reduction"
        assert str(int(np.prod(shape))) in decisions["reduce"][1]


def test_global_average_pool_counts_spatial_elements():
    small = make_model([node("GlobalAveragePool", ["x"], ["y"], name="gap")],
                       {"x": [1, 64, 8, 8]}, {"y": [1, 64, 1, 1]})
    large = make_model([node("GlobalAveragePool", ["x"], ["y"], name="gap")],
                       {"x": [1, 2, 128, 128]}, {"y": [1, 2, 1, 1]})
    assert _decisions(small) == {}
    assert _decisions(large)["gap"] == ("large-reduction", "reduces 16384 elements (limit 4096)")


def _exp_after(scale: float | None) -> onnx.ModelProto:
    if scale is None:
        nodes = [node("Exp", ["x"], ["y"], name="exp")]
        return make_model(nodes, {"x": [4]}, {"y": [4]})
    nodes = [node("Sigmoid", ["x"], ["s"], name="sig"), node("Mul", ["s", "k"], ["t"], name="mul"),
             node("Exp", ["t"], ["y"], name="exp")]
    return make_model(nodes, {"x": [4]}, {"y": [4]}, {"k": np.array(scale, np.float32)})


def test_exp_stays_fp32_unless_its_input_is_provably_small():
    assert "exp" not in _decisions(_exp_after(4.0))  # exp(4) = 54.6
    assert _decisions(_exp_after(20.0))["exp"] == ("unbounded-exp",
                                                   "upper bound of the input: 20")
    assert _decisions(_exp_after(None))["exp"][0] == "unbounded-exp"


@pytest.mark.parametrize(
    ("base_from_sigmoid", "exponent", "kept"),
    [
        (True, 2.0, False),  # YOLOv5's (2 * sigmoid) ** 2 <= 4
        (False, 2.0, True),
        (False, 0.5, False),  # |x| ** 0.5 <= max(1, |x|)
        (True, -1.0, True),  # 1 / x near zero
    ],
)
def test_pow_stays_fp32_unless_bounded(base_from_sigmoid, exponent, kept):
    nodes = [node("Pow", ["b", "e"], ["y"], name="pow")]
    weights = {"e": np.array(exponent, np.float32)}
    if base_from_sigmoid:
        nodes = [node("Sigmoid", ["x"], ["s"]), node("Mul", ["s", "two"], ["b"])] + nodes
        weights["two"] = np.array(2.0, np.float32)
    else:
        nodes = [node("Identity", ["x"], ["b"])] + nodes
    model = make_model(nodes, {"x": [4]}, {"y": [4]}, weights)
    decisions = _decisions(model)
    assert ("pow" in decisions) == kept
    if kept:
        assert decisions["pow"][0] == "unbounded-pow"


def test_shape_arithmetic_in_float_stays_fp32():
    nodes = [
        node("Shape", ["x"], ["shape"], name="shape"),
        node("Cast", ["shape"], ["shape_f"], to=onnx.TensorProto.FLOAT, name="to_float"),
        node("Mul", ["shape_f", "half"], ["half_f"], name="halve"),
        node("Cast", ["half_f"], ["half_i"], to=onnx.TensorProto.INT64, name="to_int"),
        node("Reshape", ["x", "half_i"], ["r"], name="reshape"),
        node("Relu", ["x"], ["y"], name="relu"),
    ]
    model = make_model(nodes, {"x": [4, 4]}, {"y": [4, 4]},
                       {"half": np.array([2.0, 0.5], np.float32)})
    model.graph.output.append(onnx.helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT,
                                                                 None))
    decisions = _decisions(model)
    assert decisions["to_float"][0] == "shape-arithmetic"
    assert decisions["halve"][0] == "shape-arithmetic"
    assert "relu" not in decisions and "reshape" not in decisions


def test_index_and_normalization_ops_stay_fp32():
    nodes = [
        node("LayerNormalization", ["x", "g", "b"], ["n"], name="ln", axis=-1),
        node("TopK", ["n", "k"], ["values", "indices"], name="topk"),
    ]
    weights = {"g": np.ones(8, np.float32), "b": np.zeros(8, np.float32),
               "k": np.array([2], np.int64)}
    model = make_model(nodes, {"x": [2, 8]}, {"values": [2, 2]}, weights)
    decisions = _decisions(model)
    assert decisions["ln"][0] == "normalization-statistics"
    assert decisions["topk"][0] == "index-op"


def test_ops_fp16_cannot_express_are_kept_with_the_schema_reason():
    nodes = [node("ConstantOfShape", ["shape"], ["z"], name="zeros",
                  value=onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.0])),
             node("Add", ["x", "z"], ["y"], name="add")]
    model = make_model(nodes, {"x": [2, 3]}, {"y": [2, 3]}, {"shape": np.array([2, 3], np.int64)})
    rule, detail = _decisions(model)["zeros"]
    assert rule == "fp16-not-expressible" and "attribute" in detail


def test_policy_text_documents_every_rule():
    text = render_policy()
    for rule in POLICY:
        assert rule.id in text and rule.reason[:40] in text
    assert "Resize input 2" in text
