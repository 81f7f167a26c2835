"""The BatchNormalization rules: folds into Conv, ConvTranspose and Gemm, and bn-to-affine.

Each positive test checks the BN is gone, the fused node keeps the producer's name and carries the
rule's tag, and ONNX Runtime computes the same numbers; each negative test checks the rule stayed
away and the report says why.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnxscript.rewriter import MatchResult

from edgefuse.optimize import optimize
from edgefuse.optimize.rules._batchnorm import bn_affine
from tests.optimize.graphs import (
    as_float16,
    assert_fired,
    assert_refused,
    assert_same_outputs,
    bn_node,
    bn_params,
    expose_as_input,
    in_the_pipeline_and_alone,
    initializer_array,
    make_model,
    node,
    op_types,
    optimize_only,
    random,
    random_feeds,
)

pytestmark = pytest.mark.ort


def conv_bn_model(*, bias: bool = True, group: int = 1, epsilon: float = 1e-5, seed: int = 0):
    rng = np.random.default_rng(seed)
    c_in, c_out = 2 * group, 3 * group
    weights = {"w": random(rng, c_out, c_in // group, 3, 3)}
    if bias:
        weights["b"] = random(rng, c_out)
    conv = node(
        "Conv", ["x", "w", *(["b"] if bias else [])], ["c"], name="conv", group=group, pads=[1] * 4
    )
    return make_model(
        [conv, bn_node("c", "y", epsilon=epsilon)],
        {"x": [1, c_in, 6, 6]},
        ["y"],
        {**weights, **bn_params(rng, c_out)},
    )


# --- fold-bn-into-conv -------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("group", [1, 2])
def test_fold_bn_into_conv_folds_and_keeps_the_numbers(bias, group):
    model = conv_bn_model(bias=bias, group=group, epsilon=1e-3)
    result = optimize_only(model, "fold-bn-into-conv")
    assert_fired(
        result,
        "fold-bn-into-conv",
        gone=["BatchNormalization"],
        tagged={"conv": "fold-bn-into-conv"},
    )
    assert op_types(result.model) == {"Conv": 1}
    assert_same_outputs(model, result.model)


def test_fold_bn_into_conv_refuses_weights_shared_with_another_conv():
    rng = np.random.default_rng(1)
    model = make_model(
        [
            node("Conv", ["x", "w"], ["c"], name="conv"),
            bn_node("c", "y"),
            node("Conv", ["x", "w"], ["z"], name="other_conv", strides=[2, 2]),
        ],
        {"x": [1, 2, 5, 5]},
        ["y", "z"],
        {"w": random(rng, 3, 2, 3, 3), **bn_params(rng, 3)},
    )
    result = optimize_only(model, "fold-bn-into-conv")
    assert_refused(
        result, "fold-bn-into-conv", r"W 'w' is shared with node 'other_conv' outside", "bn"
    )
    assert op_types(result.model)["BatchNormalization"] == 1


def test_fold_bn_into_conv_refuses_a_bias_shared_with_another_conv():
    model = conv_bn_model()
    model.graph.node.append(node("Conv", ["x", "w2", "b"], ["z"], name="other_conv"))
    model.graph.initializer.append(
        onnx.numpy_helper.from_array(random(np.random.default_rng(9), 3, 2, 1, 1), "w2")
    )
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-bn-into-conv")
    assert_refused(
        result, "fold-bn-into-conv", r"B 'b' is shared with node 'other_conv' outside", "bn"
    )
    assert_same_outputs(model, result.model)


def test_fold_bn_into_conv_refuses_a_conv_output_read_elsewhere():
    rng = np.random.default_rng(2)
    model = make_model(
        [
            node("Conv", ["x", "w"], ["c"], name="conv"),
            bn_node("c", "y"),
            node("Relu", ["c"], ["z"], name="relu"),
        ],
        {"x": [1, 2, 5, 5]},
        ["y", "z"],
        {"w": random(rng, 3, 2, 3, 3), **bn_params(rng, 3)},
    )
    result = optimize_only(model, "fold-bn-into-conv")
    assert_refused(result, "fold-bn-into-conv", r"consumers outside the pattern", "bn")


def test_fold_bn_into_conv_refuses_statistics_fed_as_graph_inputs():
    rng = np.random.default_rng(3)
    params = bn_params(rng, 3)
    del params["bn.mean"]
    model = make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "y")],
        {"x": [1, 2, 5, 5], "bn.mean": [3]},
        ["y"],
        {"w": random(rng, 3, 2, 3, 3), **params},
    )
    result = optimize_only(model, "fold-bn-into-conv")
    assert_refused(
        result, "fold-bn-into-conv", r"input_mean 'bn.mean' is not constant \(a graph input\)", "bn"
    )


@in_the_pipeline_and_alone
def test_fold_bn_into_conv_refuses_an_initializer_the_caller_can_override(apply):
    """An initializer that is also a graph input is a default, not a constant (IR >= 4)."""
    model = conv_bn_model()
    model.graph.input.append(
        onnx.helper.make_tensor_value_info("bn.var", onnx.TensorProto.FLOAT, [3])
    )
    onnx.checker.check_model(model, full_check=True)
    result = apply(model, "fold-bn-into-conv")
    assert_refused(
        result, "fold-bn-into-conv", r"input_var 'bn.var' is not constant \(a graph input\)", "bn"
    )
    assert [i.name for i in result.model.graph.input] == ["x", "bn.var"]


def test_fold_bn_into_conv_refuses_weights_fed_as_graph_inputs():
    rng = np.random.default_rng(4)
    model = make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "y")],
        {"x": [1, 2, 5, 5], "w": [3, 2, 3, 3]},
        ["y"],
        bn_params(rng, 3),
    )
    result = optimize_only(model, "fold-bn-into-conv")
    assert_refused(result, "fold-bn-into-conv", r"W 'w' is not constant \(a graph input\)", "bn")


def test_fold_bn_into_conv_refuses_training_mode():
    model = conv_bn_model()
    set_training_mode(model.graph.node[1])
    result = optimize_only(model, "fold-bn-into-conv")
    assert_refused(result, "fold-bn-into-conv", r"'bn' has training_mode=1", "bn")


def set_training_mode(bn: onnx.NodeProto) -> None:
    """Opset 14+: a training-mode BatchNormalization also outputs its running statistics."""
    bn.attribute.append(onnx.helper.make_attribute("training_mode", 1))
    bn.output.extend([f"{bn.name}.running_mean", f"{bn.name}.running_var"])


def test_bn_affine_refuses_a_bn_whose_running_statistics_are_read():
    """The matcher refuses such a BN first (its extra outputs are read outside the pattern); the
    BN rules' own check is the second line of defence and must hold on its own."""
    model = conv_bn_model()
    model.graph.node[1].output.append("bn.running_mean")
    model.graph.node.append(node("Relu", ["bn.running_mean"], ["z"], name="stats_reader"))
    bn = next(n for n in ir.serde.deserialize_model(model).graph if n.name == "bn")
    result = MatchResult()
    assert bn_affine(result, bn) is None
    assert result.reason == "BatchNormalization 'bn' exposes its running statistics"
    del model.graph.node[2]
    bn = next(n for n in ir.serde.deserialize_model(model).graph if n.name == "bn")
    assert bn_affine(MatchResult(), bn) is not None


# --- fold-bn-into-conv-transpose ---------------------------------------------------------------


def conv_transpose_bn_model(*, bias: bool, group: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    c_in, c_out = 2 * group, 3 * group
    weights = {"w": random(rng, c_in, c_out // group, 3, 3)}
    if bias:
        weights["b"] = random(rng, c_out)
    deconv = node(
        "ConvTranspose",
        ["x", "w", *(["b"] if bias else [])],
        ["d"],
        name="deconv",
        group=group,
        strides=[2, 2],
    )
    return make_model(
        [deconv, bn_node("d", "y")],
        {"x": [1, c_in, 4, 4]},
        ["y"],
        {**weights, **bn_params(rng, c_out)},
    )


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("group", [1, 2])
def test_fold_bn_into_conv_transpose_folds_and_keeps_the_numbers(bias, group):
    model = conv_transpose_bn_model(bias=bias, group=group)
    result = optimize_only(model, "fold-bn-into-conv-transpose")
    assert_fired(
        result,
        "fold-bn-into-conv-transpose",
        gone=["BatchNormalization"],
        tagged={"deconv": "fold-bn-into-conv-transpose"},
    )
    assert_same_outputs(model, result.model)


def test_fold_bn_into_conv_transpose_refuses_shared_bias():
    model = conv_transpose_bn_model(bias=True, group=1)
    model.graph.input.append(onnx.helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [3]))
    model.graph.node.append(node("Add", ["t", "b"], ["z"], name="bias_reader"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [3]))
    result = optimize_only(model, "fold-bn-into-conv-transpose")
    assert_refused(
        result, "fold-bn-into-conv-transpose", r"B 'b' is shared with node 'bias_reader'", "bn"
    )


def test_fold_bn_into_conv_transpose_refuses_an_output_read_elsewhere():
    model = conv_transpose_bn_model(bias=False, group=1)
    model.graph.node.append(node("Relu", ["d"], ["z"], name="relu"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-bn-into-conv-transpose")
    assert_refused(result, "fold-bn-into-conv-transpose", r"consumers outside the pattern", "bn")


def test_fold_bn_into_conv_transpose_refuses_weights_fed_as_graph_inputs():
    rng = np.random.default_rng(14)
    model = make_model(
        [node("ConvTranspose", ["x", "w"], ["d"], name="deconv"), bn_node("d", "y")],
        {"x": [1, 2, 4, 4], "w": [2, 3, 3, 3]},
        ["y"],
        bn_params(rng, 3),
    )
    result = optimize_only(model, "fold-bn-into-conv-transpose")
    assert_refused(
        result, "fold-bn-into-conv-transpose", r"W 'w' is not constant \(a graph input\)", "bn"
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("overridable", ["w", "b", "bn.var"])
@in_the_pipeline_and_alone
def test_fold_bn_into_conv_transpose_refuses_a_default_the_caller_can_override(overridable, apply):
    model = expose_as_input(conv_transpose_bn_model(bias=True, group=1), overridable)
    result = apply(model, "fold-bn-into-conv-transpose")
    assert_refused(
        result,
        "fold-bn-into-conv-transpose",
        rf"'{overridable}' is not constant \(a graph input\)",
        "bn",
    )
    feeds = random_feeds(model)
    feeds[overridable] = 2 * initializer_array(model, overridable)
    assert_same_outputs(model, result.model, feeds)


def test_fold_bn_into_conv_transpose_refuses_weights_shared_with_another_node():
    model = conv_transpose_bn_model(bias=True, group=1)
    model.graph.node.append(node("ConvTranspose", ["x", "w"], ["z"], name="twin"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-bn-into-conv-transpose")
    assert_refused(result, "fold-bn-into-conv-transpose", r"W 'w' is shared with node 'twin'", "bn")
    assert_same_outputs(model, result.model)


# --- fold-bn-into-gemm -------------------------------------------------------------------------


def gemm_bn_model(*, trans_b: int, beta: float = 1.0, alpha: float = 1.0, c_shape=(4,), seed=0):
    rng = np.random.default_rng(seed)
    weights = {"wb": random(rng, *((4, 5) if trans_b else (5, 4)))}
    inputs = ["a", "wb"]
    if c_shape is not None:
        weights["wc"] = random(rng, *c_shape)
        inputs.append("wc")
    gemm = node("Gemm", inputs, ["g"], name="gemm", transB=trans_b, alpha=alpha, beta=beta)
    return make_model(
        [gemm, bn_node("g", "y")], {"a": [3, 5]}, ["y"], {**weights, **bn_params(rng, 4)}
    )


@pytest.mark.parametrize("trans_b", [0, 1], ids=["transB0", "transB1"])
@pytest.mark.parametrize(
    ("alpha", "beta", "c_shape"),
    [(1.0, 1.0, (4,)), (2.0, 0.5, (1, 4)), (1.0, 3.0, (1,)), (0.5, 1.0, None)],
    ids=["plain", "alpha-beta", "scalar-c", "no-c"],
)
def test_fold_bn_into_gemm_folds_and_keeps_the_numbers(trans_b, alpha, beta, c_shape):
    model = gemm_bn_model(trans_b=trans_b, alpha=alpha, beta=beta, c_shape=c_shape)
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_fired(
        result,
        "fold-bn-into-gemm",
        gone=["BatchNormalization"],
        tagged={"gemm": "fold-bn-into-gemm"},
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(
    ("c_shape", "reason"),
    [((3, 4), r"is not per-feature|not per-channel"), ((3, 1), r"not per-channel|per-feature")],
    ids=["per-element", "per-row"],
)
def test_fold_bn_into_gemm_refuses_a_bias_that_is_not_per_feature(c_shape, reason):
    model = gemm_bn_model(trans_b=0, c_shape=c_shape)
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_refused(result, "fold-bn-into-gemm", reason, "bn")


def test_fold_bn_into_gemm_refuses_a_per_row_bias_even_when_rows_equal_features():
    """C of shape [M, 1] broadcasts along the batch; with M == N its size looks per-feature."""
    rng = np.random.default_rng(5)
    model = make_model(
        [node("Gemm", ["a", "wb", "wc"], ["g"], name="gemm"), bn_node("g", "y")],
        {"a": [4, 5]},
        ["y"],
        {"wb": random(rng, 5, 4), "wc": random(rng, 4, 1), **bn_params(rng, 4)},
    )
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_refused(result, "fold-bn-into-gemm", r"not per-channel \(axis 0 is 4\)", "bn")
    assert_same_outputs(model, result.model)


def test_fold_bn_into_gemm_refuses_weights_shared_with_another_gemm():
    model = gemm_bn_model(trans_b=1)
    model.graph.node.append(node("Gemm", ["a", "wb"], ["z"], name="other_gemm", transB=1))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_refused(result, "fold-bn-into-gemm", r"B 'wb' is shared with node 'other_gemm'", "bn")


def test_fold_bn_into_gemm_refuses_a_bias_shared_with_another_node():
    model = gemm_bn_model(trans_b=0)
    model.graph.input.append(onnx.helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [4]))
    model.graph.node.append(node("Add", ["t", "wc"], ["z"], name="bias_reader"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_refused(result, "fold-bn-into-gemm", r"C 'wc' is shared with node 'bias_reader'", "bn")
    assert_same_outputs(model, result.model)


def test_fold_bn_into_gemm_refuses_a_gemm_output_read_elsewhere():
    model = gemm_bn_model(trans_b=1)
    model.graph.node.append(node("Relu", ["g"], ["z"], name="relu"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_refused(result, "fold-bn-into-gemm", r"consumers outside the pattern", "bn")
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(("role", "name", "shape"), [("B", "wb", [5, 4]), ("C", "wc", [4])])
def test_fold_bn_into_gemm_refuses_weights_fed_as_graph_inputs(role, name, shape):
    rng = np.random.default_rng(15)
    weights = {"wb": random(rng, 5, 4), "wc": random(rng, 4), **bn_params(rng, 4)}
    del weights[name]
    model = make_model(
        [node("Gemm", ["a", "wb", "wc"], ["g"], name="gemm"), bn_node("g", "y")],
        {"a": [3, 5], name: shape},
        ["y"],
        weights,
    )
    result = optimize_only(model, "fold-bn-into-gemm")
    assert_refused(
        result, "fold-bn-into-gemm", rf"{role} '{name}' is not constant \(a graph input\)", "bn"
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("overridable", ["wb", "wc", "bn.mean"])
@in_the_pipeline_and_alone
def test_fold_bn_into_gemm_refuses_a_default_the_caller_can_override(overridable, apply):
    model = expose_as_input(gemm_bn_model(trans_b=1), overridable)
    result = apply(model, "fold-bn-into-gemm")
    assert_refused(
        result, "fold-bn-into-gemm", rf"'{overridable}' is not constant \(a graph input\)", "bn"
    )
    feeds = random_feeds(model)
    feeds[overridable] = 2 * initializer_array(model, overridable)
    assert_same_outputs(model, result.model, feeds)


@pytest.mark.parametrize(
    ("build", "rule_id", "weights"),
    [
        (conv_bn_model, "fold-bn-into-conv", "w"),
        (lambda: conv_transpose_bn_model(bias=True, group=1), "fold-bn-into-conv-transpose", "w"),
        (lambda: gemm_bn_model(trans_b=0), "fold-bn-into-gemm", "wb"),
    ],
    ids=["conv", "conv-transpose", "gemm"],
)
def test_bn_folds_refuse_float16_weights(build, rule_id, weights):
    model = as_float16(build())
    result = optimize_only(model, rule_id)
    reason = rf"^'{weights}' is FLOAT16; only float32/float64 are folded$"
    assert_refused(result, rule_id, reason, "bn")
    assert_same_outputs(model, result.model)


# --- bn-to-affine ------------------------------------------------------------------------------


def relu_bn_model(rank: int = 4, seed: int = 0, **bn_attributes):
    rng = np.random.default_rng(seed)
    shape = [2, 3, 5, 4, 2][:rank]
    return make_model(
        [node("Relu", ["x"], ["r"], name="relu"), bn_node("r", "y", **bn_attributes)],
        {"x": shape},
        ["y"],
        bn_params(rng, 3),
    )


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
def test_bn_to_affine_spells_a_standalone_bn_as_mul_add(rank):
    model = relu_bn_model(rank, epsilon=1e-2)
    result = optimize_only(model, "bn-to-affine")
    assert_fired(result, "bn-to-affine", gone=["BatchNormalization"])
    assert op_types(result.model) == {"Relu": 1, "Mul": 1, "Add": 1}
    tags = {n.op_type: n for n in result.model.graph.node if n.op_type != "Relu"}
    for op in ("Mul", "Add"):
        assert {p.key: p.value for p in tags[op].metadata_props}["edgefuse.rule"] == "bn-to-affine"
    assert "bn" in {n.name for n in result.model.graph.node}
    assert_same_outputs(model, result.model)


def test_bn_to_affine_keeps_the_input_dtype_when_bn_parameters_are_float16():
    """BatchNormalization (opset 15+) may carry float16 scale/bias on a float32 input."""
    model = relu_bn_model()
    for init in model.graph.initializer:
        if init.name in ("bn.scale", "bn.bias"):
            array = onnx.numpy_helper.to_array(init).astype(np.float16)
            init.CopyFrom(onnx.numpy_helper.from_array(array, init.name))
    result = optimize_only(model, "bn-to-affine")
    assert_fired(result, "bn-to-affine", gone=["BatchNormalization"])
    dtypes = {init.name: init.data_type for init in result.model.graph.initializer}
    assert set(dtypes.values()) == {onnx.TensorProto.FLOAT}


def test_bn_to_affine_refuses_training_mode():
    model = relu_bn_model()
    set_training_mode(model.graph.node[1])
    result = optimize_only(model, "bn-to-affine")
    assert_refused(result, "bn-to-affine", r"has training_mode=1", "bn")


def test_bn_to_affine_refuses_a_variance_fed_as_graph_input():
    rng = np.random.default_rng(6)
    params = bn_params(rng, 3)
    del params["bn.var"]
    model = make_model(
        [node("Relu", ["x"], ["r"], name="relu"), bn_node("r", "y")],
        {"x": [2, 3, 4, 4], "bn.var": [3]},
        ["y"],
        params,
    )
    result = optimize_only(model, "bn-to-affine")
    assert_refused(
        result, "bn-to-affine", r"input_var 'bn.var' is not constant \(a graph input\)", "bn"
    )


@in_the_pipeline_and_alone
def test_bn_to_affine_refuses_a_variance_the_caller_can_override(apply):
    model = expose_as_input(relu_bn_model(), "bn.var")
    result = apply(model, "bn-to-affine")
    assert_refused(
        result, "bn-to-affine", r"input_var 'bn.var' is not constant \(a graph input\)", "bn"
    )
    feeds = random_feeds(model)
    feeds["bn.var"] = 2 * initializer_array(model, "bn.var")
    assert_same_outputs(model, result.model, feeds)


def test_bn_to_affine_refuses_an_input_of_unknown_rank():
    rng = np.random.default_rng(7)
    model = make_model(
        [
            node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            bn_node("r", "bn_out"),
            node("ReduceSum", ["bn_out"], ["y"], name="sum", keepdims=0),
        ],
        {"x": [2, 3, 4, 4], "shape": (onnx.TensorProto.INT64, ["n"])},
        {"y": []},
        bn_params(rng, 3),
    )
    result = optimize_only(model, "bn-to-affine")
    assert_refused(result, "bn-to-affine", r"the rank of 'r' is unknown", "bn")


def test_full_pipeline_prefers_the_fold_over_bn_to_affine():
    model = conv_bn_model()
    result = optimize_only(model, "fold-bn-into-conv", "bn-to-affine")
    assert result.report.rules["fold-bn-into-conv"].applied == 1
    assert result.report.rules["bn-to-affine"].matched == 0
    assert op_types(result.model) == {"Conv": 1}


def with_noop_between_producer_and_bn(model: onnx.ModelProto, rank: int) -> onnx.ModelProto:
    """An identity-perm Transpose after the first node: removed in round 1, leaving an Identity."""
    producer = model.graph.node[0]
    bn_input = producer.output[0]
    producer.output[0] = "before_noop"
    noop = node("Transpose", ["before_noop"], [bn_input], name="noop", perm=list(range(rank)))
    model.graph.node.insert(1, noop)
    return model


@pytest.mark.parametrize(
    ("model", "rank", "fold"),
    [
        (gemm_bn_model(trans_b=1), 2, "fold-bn-into-gemm"),
        (conv_transpose_bn_model(bias=True, group=1), 4, "fold-bn-into-conv-transpose"),
    ],
    ids=["gemm", "conv-transpose"],
)
def test_a_bn_behind_a_removed_noop_still_folds_into_its_producer(model, rank, fold):
    """bn-to-affine must not take a BN whose producer an Identity hides for one round: no rule
    folds the Mul/Add it would leave into a Gemm or a ConvTranspose."""
    model = with_noop_between_producer_and_bn(model, rank)
    result = optimize(model)
    assert op_types(result.model) == {model.graph.node[0].op_type: 1}
    assert result.report.rules[fold].applied == 1
    assert_same_outputs(model, result.model)
