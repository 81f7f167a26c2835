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
    as_float16,
    assert_fired,
    assert_not_applicable,
    assert_refused,
    assert_same_outputs,
    expose_as_input,
    in_the_pipeline_and_alone,
    initializer_array,
    make_model,
    node,
    op_types,
    optimize_only,
    positive,
    random,
    random_feeds,
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


def read_elsewhere(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """Make ``value`` a graph output too: a consumer outside any pattern."""
    model.graph.output.append(
        onnx.helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, None)
    )
    return model


def shared_with_twin(model: onnx.ModelProto, *conv_inputs: str) -> onnx.ModelProto:
    """A second Conv ("twin", a graph output) that reads ``conv_inputs`` too."""
    model.graph.node.append(node("Conv", list(conv_inputs), ["z"], name="twin", strides=[2, 2]))
    return read_elsewhere(model, "z")


def weights_as_graph_input(build, op_type: str, constant: np.ndarray) -> onnx.ModelProto:
    """The model ``build`` makes, with the Conv weights 'w' fed by the caller instead."""
    model = build(op_type, constant)
    (w,) = [init for init in model.graph.initializer if init.name == "w"]
    model.graph.initializer.remove(w)
    model.graph.input.append(onnx.helper.make_tensor_value_info("w", w.data_type, list(w.dims)))
    onnx.checker.check_model(model, full_check=True)
    return model


def overriding(model: onnx.ModelProto, name: str) -> dict[str, np.ndarray]:
    """Random feeds that also override the default of ``name`` (twice its value)."""
    feeds = random_feeds(model)
    feeds[name] = 2 * initializer_array(model, name) + 1
    return feeds


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


def test_fold_mul_into_conv_refuses_a_bias_shared_with_another_conv():
    model = shared_with_twin(conv_then("Mul", PER_OUTPUT_CHANNEL["[1,C,1,1]"]), "x", "w2", "b")
    model.graph.initializer.append(
        onnx.numpy_helper.from_array(random(np.random.default_rng(20), C_OUT, C_IN, 1, 1), "w2")
    )
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(result, "fold-mul-into-conv", r"B 'b' is shared with node 'twin'", "after")
    assert_same_outputs(model, result.model)


def test_fold_mul_into_conv_refuses_weights_fed_as_graph_input():
    model = weights_as_graph_input(conv_then, "Mul", PER_OUTPUT_CHANNEL["[1,C,1,1]"])
    result = optimize_only(model, "fold-mul-into-conv")
    assert_refused(
        result, "fold-mul-into-conv", r"W 'w' is not constant \(a graph input\)", "after"
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("overridable", ["k", "w", "b"])
@in_the_pipeline_and_alone
def test_fold_mul_into_conv_refuses_a_default_the_caller_can_override(overridable, apply):
    model = expose_as_input(conv_then("Mul", PER_OUTPUT_CHANNEL["[1,C,1,1]"]), overridable)
    result = apply(model, "fold-mul-into-conv")
    assert_refused(
        result, "fold-mul-into-conv", rf"'{overridable}' is not constant \(a graph input\)", "after"
    )
    assert_same_outputs(model, result.model, overriding(model, overridable))


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


def test_fold_add_into_conv_folds_even_when_the_weights_are_shared():
    """Only the bias is rewritten; the shared weights stay as they are, read by both Convs."""
    model = shared_with_twin(conv_then("Add", PER_OUTPUT_CHANNEL["[C,1,1]"]), "x", "w")
    result = optimize_only(model, "fold-add-into-conv")
    assert_fired(result, "fold-add-into-conv", gone=["Add"])
    assert_same_outputs(model, result.model)


def test_fold_add_into_conv_refuses_a_conv_output_read_elsewhere():
    model = read_elsewhere(conv_then("Add", PER_OUTPUT_CHANNEL["[1,C,1,1]"]), "c")
    result = optimize_only(model, "fold-add-into-conv")
    assert_refused(result, "fold-add-into-conv", r"consumers outside the pattern", "after")
    assert_same_outputs(model, result.model)


def test_fold_add_into_conv_refuses_weights_fed_as_graph_input():
    model = weights_as_graph_input(conv_then, "Add", PER_OUTPUT_CHANNEL["[1,C,1,1]"])
    result = optimize_only(model, "fold-add-into-conv")
    assert_refused(
        result, "fold-add-into-conv", r"W 'w' is not constant \(a graph input\)", "after"
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("overridable", ["k", "b"])
@in_the_pipeline_and_alone
def test_fold_add_into_conv_refuses_a_default_the_caller_can_override(overridable, apply):
    model = expose_as_input(conv_then("Add", PER_OUTPUT_CHANNEL["[1,C,1,1]"]), overridable)
    result = apply(model, "fold-add-into-conv")
    assert_refused(
        result, "fold-add-into-conv", rf"'{overridable}' is not constant \(a graph input\)", "after"
    )
    assert_same_outputs(model, result.model, overriding(model, overridable))


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


def test_fold_input_scale_into_conv_folds_even_when_the_bias_is_shared():
    """Only the weights are rewritten; the shared bias stays as it is, read by both Convs."""
    model = then_conv("Mul", PER_INPUT_CHANNEL["[1,C,1,1]"])
    model.graph.initializer.append(
        onnx.numpy_helper.from_array(random(np.random.default_rng(21), C_OUT, C_IN, 1, 1), "w2")
    )
    model = shared_with_twin(model, "x", "w2", "b")
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_fired(result, "fold-input-scale-into-conv", gone=["Mul"])
    assert_same_outputs(model, result.model)


def test_fold_input_scale_into_conv_refuses_weights_fed_as_graph_input():
    model = weights_as_graph_input(then_conv, "Mul", PER_INPUT_CHANNEL["[1,C,1,1]"])
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_refused(
        result, "fold-input-scale-into-conv", r"W 'w' is not constant \(a graph input\)", "conv"
    )
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("overridable", ["k", "w"])
@in_the_pipeline_and_alone
def test_fold_input_scale_into_conv_refuses_a_default_the_caller_can_override(overridable, apply):
    model = expose_as_input(then_conv("Mul", PER_INPUT_CHANNEL["[1,C,1,1]"]), overridable)
    result = apply(model, "fold-input-scale-into-conv")
    assert_refused(
        result,
        "fold-input-scale-into-conv",
        rf"'{overridable}' is not constant \(a graph input\)",
        "conv",
    )
    assert_same_outputs(model, result.model, overriding(model, overridable))


def test_fold_input_scale_into_conv_does_not_count_a_multiplier_computed_at_run_time():
    rng = np.random.default_rng(22)
    model = make_model(
        [
            node("Relu", ["t"], ["k"], name="relu"),
            node("Mul", ["x", "k"], ["m"], name="before"),
            node("Conv", ["m", "w"], ["y"], name="conv"),
        ],
        {"x": [1, C_IN, 6, 6], "t": [1, C_IN, 1, 1]},
        ["y"],
        {"w": random(rng, C_OUT, C_IN, 3, 3)},
    )
    result = optimize_only(model, "fold-input-scale-into-conv")
    assert_not_applicable(result, "fold-input-scale-into-conv")
    assert_same_outputs(model, result.model)


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


def test_fold_input_offset_into_conv_refuses_a_bias_shared_with_another_conv():
    model = then_conv("Add", PER_INPUT_CHANNEL["[1,C,1,1]"])
    model.graph.initializer.append(
        onnx.numpy_helper.from_array(random(np.random.default_rng(23), C_OUT, C_IN, 1, 1), "w2")
    )
    model = shared_with_twin(model, "x", "w2", "b")
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_refused(
        result, "fold-input-offset-into-conv", r"B 'b' is shared with node 'twin'", "conv"
    )
    assert_same_outputs(model, result.model)


def test_fold_input_offset_into_conv_folds_even_when_the_weights_are_shared():
    """Only the bias is rewritten; the shared weights stay as they are, read by both Convs."""
    model = shared_with_twin(then_conv("Add", PER_INPUT_CHANNEL["[1,C,1,1]"]), "x", "w")
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_fired(result, "fold-input-offset-into-conv", gone=["Add"])
    assert_same_outputs(model, result.model)


def test_fold_input_offset_into_conv_refuses_an_offset_input_read_elsewhere():
    model = read_elsewhere(then_conv("Add", PER_INPUT_CHANNEL["[1,C,1,1]"]), "m")
    result = optimize_only(model, "fold-input-offset-into-conv")
    assert_refused(result, "fold-input-offset-into-conv", r"consumers outside the pattern", "conv")
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("overridable", ["k", "w", "b"])
@in_the_pipeline_and_alone
def test_fold_input_offset_into_conv_refuses_a_default_the_caller_can_override(overridable, apply):
    model = expose_as_input(then_conv("Add", PER_INPUT_CHANNEL["[1,C,1,1]"]), overridable)
    result = apply(model, "fold-input-offset-into-conv")
    assert_refused(
        result,
        "fold-input-offset-into-conv",
        rf"'{overridable}' is not constant \(a graph input\)",
        "conv",
    )
    assert_same_outputs(model, result.model, overriding(model, overridable))



@pytest.mark.parametrize(
    ("build", "op_type", "rule_id", "root"),
    [
        (conv_then, "Mul", "fold-mul-into-conv", "after"),
        (conv_then, "Add", "fold-add-into-conv", "after"),
        (then_conv, "Mul", "fold-input-scale-into-conv", "conv"),
        (then_conv, "Add", "fold-input-offset-into-conv", "conv"),
    ],
    ids=["mul", "add", "input-scale", "input-offset"],
)
def test_conv_folds_refuse_float16_weights(build, op_type, rule_id, root):
    constant = np.full((1, C_OUT if build is conv_then else C_IN, 1, 1), 0.5, np.float32)
    model = as_float16(build(op_type, constant))
    result = optimize_only(model, rule_id)
    assert_refused(result, rule_id, r"^'w' is FLOAT16; only float32/float64 are folded$", root)
    assert_same_outputs(model, result.model)
