"""Per-channel constants folded into a Conv: Mul/Add after it, Mul/Add in front of it.

What makes these folds exact is that the constant acts per channel and does not broadcast the
tensor it touches; the negative tests pin each way that can fail (a ``[C]`` vector on a 4-D
tensor broadcasts along the width, a constant that adds channels or a rank, zero padding).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.optimize.graphs import (
    assert_fired,
    assert_not_applicable,
    assert_refused,
    assert_same_outputs,
    make_model,
    node,
    op_types,
    optimize_only,
    positive,
    random,
)

pytestmark = pytest.mark.ort

C_IN, C_OUT = 4, 8


def conv_then(op_type: str, constant: np.ndarray, *, bias=True, group=1, constant_first=False):
    """``op_type(Conv(x), constant)``, the constant on either side."""
    rng = np.random.default_rng(0)
    weights = {"w": random(rng, C_OUT, C_IN // group, 3, 3), "k": constant}
    if bias:
        weights["b"] = random(rng, C_OUT)
    operands = ["k", "c"] if constant_first else ["c", "k"]
    return make_model(
        [
            node("Conv", ["x", "w", *(["b"] if bias else [])], ["c"], name="conv", group=group),
            node(op_type, operands, ["y"], name="after"),
        ],
        {"x": [1, C_IN, 6, 6]},
        ["y"],
        weights,
    )


def then_conv(op_type: str, constant: np.ndarray, *, x_shape=(1, C_IN, 6, 6), group=1, **conv):
    """``Conv(op_type(x, constant))``."""
    rng = np.random.default_rng(1)
    return make_model(
        [
            node(op_type, ["x", "k"], ["m"], name="before"),
            node("Conv", ["m", "w", "b"], ["y"], name="conv", group=group, **conv),
        ],
        {"x": list(x_shape)},
        ["y"],
        {"k": constant, "w": random(rng, C_OUT, C_IN // group, 3, 3), "b": random(rng, C_OUT)},
    )


PER_OUTPUT_CHANNEL = {
    "[1,C,1,1]": positive(np.random.default_rng(2), 1, C_OUT, 1, 1),
    "[C,1,1]": positive(np.random.default_rng(3), C_OUT, 1, 1),
    "scalar": np.float32(1.7),
}
PER_INPUT_CHANNEL = {
    "[1,C,1,1]": positive(np.random.default_rng(4), 1, C_IN, 1, 1),
    "[C,1,1]": positive(np.random.default_rng(5), C_IN, 1, 1),
    "[1]": np.array([0.6], np.float32),
}


# --- fold-mul-into-conv ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", list(PER_OUTPUT_CHANNEL))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("constant_first", [False, True], ids=["conv*k", "k*conv"])
def test_fold_mul_into_conv(shape, bias, constant_first):
    model = conv_then("Mul", PER_OUTPUT_CHANNEL[shape], bias=bias, constant_first=constant_first)
    result = optimize_only(model, "fold-mul-into-conv")
    assert_fired(result, "fold-mul-into-conv", gone=["Mul"], tagged={"conv": "fold-mul-into-conv"})
    assert_same_outputs(model, result.model)


def test_fold_mul_into_grouped_conv():
    model = conv_then("Mul", PER_OUTPUT_CHANNEL["[1,C,1,1]"], group=2)
    result = optimize_only(model, "fold-mul-into-conv")
    assert_fired(result, "fold-mul-into-conv", gone=["Mul"])
    assert_same_outputs(model, result.model)


def test_fold_mul_into_conv_refuses_a_vector_that_broadcasts_along_the_width():
    model = conv_then("Mul", positive(np.random.default_rng(6), 4))  # the Conv output is 4 wide
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(result, "fold-mul-into-conv", r"not per-channel \(axis 3 is 4\)", "after")
    assert_same_outputs(model, result.model)


def test_fold_mul_into_conv_refuses_a_constant_that_adds_a_rank():
    model = conv_then("Mul", positive(np.random.default_rng(7), 1, 1, C_OUT, 1, 1))
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(result, "fold-mul-into-conv", r"would broadcast the output to rank 5", "after")


def test_fold_mul_into_conv_refuses_a_multiplier_fed_as_graph_input():
    rng = np.random.default_rng(8)
    model = make_model(
        [
            node("Conv", ["x", "w"], ["c"], name="conv"),
            node("Mul", ["c", "k"], ["y"], name="after"),
        ],
        {"x": [1, C_IN, 6, 6], "k": [1, C_OUT, 1, 1]},
        ["y"],
        {"w": random(rng, C_OUT, C_IN, 3, 3)},
    )
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(
        result, "fold-mul-into-conv", r"multiplier 'k' is not constant \(a graph input\)", "after"
    )


def test_fold_mul_into_conv_refuses_weights_shared_with_another_node():
    model = conv_then("Mul", PER_OUTPUT_CHANNEL["[1,C,1,1]"])
    model.graph.node.append(node("Conv", ["x", "w"], ["z"], name="twin", strides=[2, 2]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(result, "fold-mul-into-conv", r"W 'w' is shared with node 'twin'", "after")


def test_fold_mul_into_conv_refuses_a_conv_output_read_elsewhere():
    model = conv_then("Mul", PER_OUTPUT_CHANNEL["[1,C,1,1]"])
    model.graph.output.append(onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(result, "fold-mul-into-conv", r"consumers outside the pattern", "after")


# --- fold-add-into-conv ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", list(PER_OUTPUT_CHANNEL))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("constant_first", [False, True], ids=["conv+k", "k+conv"])
def test_fold_add_into_conv(shape, bias, constant_first):
    model = conv_then("Add", PER_OUTPUT_CHANNEL[shape], bias=bias, constant_first=constant_first)
    result = optimize_only(model, "fold-add-into-conv")
    assert_fired(result, "fold-add-into-conv", gone=["Add"], tagged={"conv": "fold-add-into-conv"})
    assert_same_outputs(model, result.model)


def test_fold_add_into_conv_refuses_a_vector_that_broadcasts_along_the_width():
    model = conv_then("Add", random(np.random.default_rng(9), 4))  # the Conv output is 4 wide
    result = optimize_only(model, "fold-add-into-conv")
    assert_refused(result, "fold-add-into-conv", r"not per-channel \(axis 3 is 4\)", "after")


def test_fold_add_into_conv_refuses_a_bias_shared_with_another_conv():
    model = conv_then("Add", PER_OUTPUT_CHANNEL["[C,1,1]"])
    model.graph.node.append(node("Conv", ["x", "w", "b"], ["z"], name="twin", strides=[2, 2]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-add-into-conv")
    assert_refused(result, "fold-add-into-conv", r"B 'b' is shared with node 'twin'", "after")


def test_fold_add_into_conv_does_not_count_an_addend_computed_at_run_time():
    # A residual Add of two computed tensors is not an Add of a constant: no match, no report line.
    rng = np.random.default_rng(10)
    model = make_model(
        [
            node("Conv", ["x", "w"], ["c"], name="conv"),
            node("Relu", ["t"], ["k"], name="relu"),
            node("Add", ["c", "k"], ["y"], name="after"),
        ],
        {"x": [1, C_IN, 6, 6], "t": [1, C_OUT, 1, 1]},
        ["y"],
        {"w": random(rng, C_OUT, C_IN, 3, 3)},
    )
    result = optimize_only(model, "fold-add-into-conv")
    assert_not_applicable(result, "fold-add-into-conv")


# --- fold-input-scale-into-conv ----------------------------------------------------------------


@pytest.mark.parametrize("shape", list(PER_INPUT_CHANNEL))
@pytest.mark.parametrize("group", [1, 2, 4], ids=["group1", "group2", "depthwise"])
def test_fold_input_scale_into_conv(shape, group):
    model = then_conv("Mul", PER_INPUT_CHANNEL[shape], group=group, pads=[1, 1, 1, 1])
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_fired(
        result,
        "fold-input-scale-into-conv",
        gone=["Mul"],
        tagged={"conv": "fold-input-scale-into-conv"},
    )
    assert_same_outputs(model, result.model)


def test_fold_input_scale_into_conv_refuses_a_vector_that_broadcasts_along_the_width():
    model = then_conv("Mul", positive(np.random.default_rng(11), 6))  # x is 6 wide
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_refused(result, "fold-input-scale-into-conv", r"not per-channel \(axis 3 is 6\)", "conv")


@pytest.mark.parametrize(
    "x_shape", [(1, 1, 6, 6), (C_IN, 6, 6)], ids=["adds-channels", "adds-a-rank"]
)
def test_fold_input_scale_into_conv_refuses_a_constant_that_broadcasts_its_input(x_shape):
    model = then_conv("Mul", PER_INPUT_CHANNEL["[1,C,1,1]"], x_shape=x_shape)
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_refused(result, "fold-input-scale-into-conv", r"broadcast", "conv")
    assert_same_outputs(model, result.model)


def test_fold_input_scale_into_conv_refuses_a_scaled_input_read_elsewhere():
    model = then_conv("Mul", PER_INPUT_CHANNEL["[1,C,1,1]"])
    model.graph.output.append(onnx.helper.make_tensor_value_info("m", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_refused(result, "fold-input-scale-into-conv", r"consumers outside the pattern", "conv")


def test_fold_input_scale_into_conv_refuses_weights_shared_with_another_conv():
    model = then_conv("Mul", PER_INPUT_CHANNEL["[1,C,1,1]"])
    model.graph.node.append(node("Conv", ["x", "w"], ["z"], name="twin"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_refused(
        result, "fold-input-scale-into-conv", r"W 'w' is shared with node 'twin'", "conv"
    )


# --- fold-input-offset-into-conv ---------------------------------------------------------------


@pytest.mark.parametrize("shape", list(PER_INPUT_CHANNEL))
@pytest.mark.parametrize("group", [1, 2, 4], ids=["group1", "group2", "depthwise"])
def test_fold_input_offset_into_conv(shape, group):
    offset = PER_INPUT_CHANNEL[shape] - 1.0
    model = then_conv("Add", offset, group=group, strides=[2, 1], dilations=[1, 2])
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_fired(
        result,
        "fold-input-offset-into-conv",
        gone=["Add"],
        tagged={"conv": "fold-input-offset-into-conv"},
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(
    "padding",
    [{"pads": [1, 0, 1, 0]}, {"auto_pad": "SAME_UPPER"}, {"auto_pad": "SAME_LOWER"}],
    ids=["pads", "same-upper", "same-lower"],
)
def test_fold_input_offset_into_conv_refuses_a_padded_conv(padding):
    model = then_conv("Add", PER_INPUT_CHANNEL["[1,C,1,1]"], **padding)
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_refused(result, "fold-input-offset-into-conv", r"pads its input with zeros", "conv")
    assert op_types(result.model)["Add"] == 1


def test_fold_input_offset_into_conv_accepts_explicit_valid_padding():
    model = then_conv("Add", PER_INPUT_CHANNEL["[C,1,1]"], auto_pad="VALID")
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_fired(result, "fold-input-offset-into-conv", gone=["Add"])
    assert_same_outputs(model, result.model)


def test_fold_input_offset_into_conv_refuses_a_vector_that_broadcasts_along_the_width():
    model = then_conv("Add", random(np.random.default_rng(12), 6))
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_refused(
        result, "fold-input-offset-into-conv", r"not per-channel \(axis 3 is 6\)", "conv"
    )


def test_fold_input_offset_into_conv_refuses_an_offset_that_adds_channels():
    model = then_conv("Add", PER_INPUT_CHANNEL["[1,C,1,1]"], x_shape=(1, 1, 6, 6))
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_refused(result, "fold-input-offset-into-conv", r"broadcast", "conv")
    assert_same_outputs(model, result.model)


def test_fold_input_offset_into_conv_refuses_an_offset_fed_as_graph_input():
    rng = np.random.default_rng(13)
    model = make_model(
        [
            node("Add", ["x", "t"], ["m"], name="before"),
            node("Conv", ["m", "w"], ["y"], name="conv"),
        ],
        {"x": [1, C_IN, 6, 6], "t": [1, C_IN, 1, 1]},
        ["y"],
        {"w": random(rng, C_OUT, C_IN, 3, 3)},
    )
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_refused(
        result,
        "fold-input-offset-into-conv",
        r"addend 't' is not constant \(a graph input\)",
        "conv",
    )
