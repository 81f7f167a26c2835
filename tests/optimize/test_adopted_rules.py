"""The eliminations and chain merges built on onnxscript's rules, fold-pad-into-conv and
recognize-hardswish.

Where onnxscript's matcher refuses without a reason (a missing attribute), the negative tests
assert only that nothing fired and the graph kept the op; remove-dropout and
remove-noop-arithmetic match every Dropout and every near-identity constant so that each refusal
carries its reason. A constant that is also a graph input is a default the caller may override:
every rule that would read it is checked against a feed that overrides it. Three rules
(remove-noop-cast, remove-noop-expand, remove-dropout at opset >= 12) never fire in the host
pipeline because the constant folder removes their targets first; their positive tests run them
without the folder, and a second test pins that the host pipeline still removes the op.
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
    expose_as_input,
    in_the_pipeline_and_alone,
    make_model,
    node,
    op_types,
    optimize_only,
    random,
    rewrite_without_folding,
    rule_tags,
)

pytestmark = pytest.mark.ort

INT64 = onnx.TensorProto.INT64


def ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def then_relu(op: onnx.NodeProto, x_shape, initializers=None, **model):
    """``Relu(op(x))``: the Relu keeps a removed op's output from being a graph output."""
    return make_model(
        [op, node("Relu", [op.output[0]], ["y"], name="relu")],
        {"x": x_shape, **model.pop("inputs", {})},
        ["y"],
        initializers,
        **model,
    )


# --- remove-dropout ----------------------------------------------------------------------------


def dropout(operands=("x",), initializers=None, **model):
    """``Relu(Dropout(x, ...))``; opset 18 unless ``opset`` says otherwise."""
    ratio = {"ratio": model.pop("ratio")} if "ratio" in model else {}
    return then_relu(
        node("Dropout", list(operands), ["d"], name="drop", **ratio),
        [2, 3],
        initializers,
        **model,
    )


def test_remove_dropout_removes_a_zero_ratio_dropout():
    model = dropout(ratio=0.0, opset=11)
    result = optimize_only(model, "remove-dropout")
    assert_fired(result, "remove-dropout", gone=["Dropout"])
    assert op_types(result.model) == {"Relu": 1}
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(
    ("operands", "initializers"),
    [
        (["x"], None),
        (["x", "ratio", "training"], {"ratio": np.float32(0.5), "training": np.bool_(False)}),
        (["x", "ratio", "training"], {"ratio": np.float32(0.0), "training": np.bool_(True)}),
    ],
    ids=["no-training-input", "training-false", "training-with-ratio-0"],
)
def test_remove_dropout_removes_an_opset18_dropout_that_is_the_identity(operands, initializers):
    model = dropout(operands, initializers)
    result = rewrite_without_folding(model, "remove-dropout")
    assert_fired(result, "remove-dropout", gone=["Dropout"])
    assert_same_outputs(model, result.model)


def test_host_pipeline_removes_an_opset18_dropout_with_the_constant_folder():
    model = dropout()
    result = optimize_only(model, "remove-dropout")
    assert result.report.rules["remove-dropout"].matched == 0
    assert op_types(result.model) == {"Relu": 1}


def assert_dropout_kept(result, model) -> None:
    """The Dropout is still there, reading what it read (a training Dropout has no fixed output)."""
    kept = [n for n in result.model.graph.node if n.op_type == "Dropout"]
    assert [list(n.input) for n in kept] == [list(model.graph.node[0].input)]


def test_remove_dropout_refuses_a_training_mode_dropout_and_says_so():
    model = dropout(
        ["x", "ratio", "training"],
        initializers={"ratio": np.float32(0.5), "training": np.bool_(True)},
    )
    for result in (optimize_only(model, "remove-dropout"),
                   rewrite_without_folding(model, "remove-dropout")):
        assert_refused(
            result,
            "remove-dropout",
            r"^Dropout 'drop' is in training mode \(training_mode 'training' is true\)$",
            "drop",
        )
        assert_dropout_kept(result, model)


def test_remove_dropout_refuses_a_training_switch_fed_at_run_time():
    model = dropout(
        ["x", "ratio", "training"],
        initializers={"ratio": np.float32(0.5)},
        inputs={"training": (onnx.TensorProto.BOOL, [])},
    )
    result = optimize_only(model, "remove-dropout")
    assert_refused(
        result,
        "remove-dropout",
        r"may run in training mode: its training_mode input 'training' is not constant "
        r"\(a graph input\)",
        "drop",
    )
    assert_dropout_kept(result, model)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "training": np.array(False)})


@in_the_pipeline_and_alone
def test_remove_dropout_refuses_a_training_switch_the_caller_can_override(apply):
    model = dropout(
        ["x", "ratio", "training"],
        initializers={"ratio": np.float32(0.5), "training": np.bool_(False)},
    )
    expose_as_input(model, "training")
    result = apply(model, "remove-dropout")
    assert_refused(
        result, "remove-dropout", r"'training' is not constant \(a graph input\)", "drop"
    )
    assert_dropout_kept(result, model)


def test_remove_dropout_refuses_an_opset11_dropout_with_a_nonzero_ratio_and_says_why():
    model = dropout(ratio=0.5, opset=11)
    result = optimize_only(model, "remove-dropout")
    assert_refused(
        result,
        "remove-dropout",
        r"Dropout 'drop' has ratio 0.5, and at opset 11 it has no training_mode input",
        "drop",
    )
    assert op_types(result.model)["Dropout"] == 1
    assert_same_outputs(model, result.model)


def test_remove_dropout_refuses_a_dropout_whose_mask_is_read():
    model = make_model(
        [
            node("Dropout", ["x"], ["d", "mask"], name="drop", ratio=0.0),
            node("Cast", ["mask"], ["m"], name="mask_as_float", to=onnx.TensorProto.FLOAT),
            node("Add", ["d", "m"], ["y"], name="add"),
        ],
        {"x": [2, 3]},
        ["y"],
        opset=11,
    )
    result = optimize_only(model, "remove-dropout")
    assert_refused(result, "remove-dropout", r"consumers outside the pattern", "drop")
    assert op_types(result.model)["Dropout"] == 1
    assert_same_outputs(model, result.model)


# --- remove-noop-arithmetic --------------------------------------------------------------------

NOOPS = {
    "x*1": ("Mul", ["x", "k"], 1.0),
    "1*x": ("Mul", ["k", "x"], 1.0),
    "x+0": ("Add", ["x", "k"], 0.0),
    "0+x": ("Add", ["k", "x"], 0.0),
    "x-0": ("Sub", ["x", "k"], 0.0),
    "x/1": ("Div", ["x", "k"], 1.0),
}


@pytest.mark.parametrize("form", list(NOOPS))
@pytest.mark.parametrize("shape", [(), (1,)], ids=["scalar", "[1]"])
def test_remove_noop_arithmetic(form, shape):
    op_type, operands, value = NOOPS[form]
    constant = np.full(shape, value, np.float32)
    model = then_relu(node(op_type, operands, ["a"], name="noop"), [2, 3], {"k": constant})
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_fired(result, "remove-noop-arithmetic", gone=[op_type])
    assert op_types(result.model) == {"Relu": 1}
    assert_same_outputs(model, result.model)


def test_remove_noop_arithmetic_removes_x_times_a_one_other_nodes_also_read():
    """The constant is not rewritten, only the op around it goes: sharing it is harmless."""
    model = make_model(
        [
            node("Mul", ["x", "k"], ["a"], name="noop"),
            node("Add", ["a", "k"], ["y"], name="plus_one"),
        ],
        {"x": [2, 3]},
        ["y"],
        {"k": np.float32(1.0)},
    )
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_fired(result, "remove-noop-arithmetic", gone=["Mul"])
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(
    ("op_type", "value", "reason"),
    [
        ("Add", 1e-9, r"^the constant 'k' is 1e-09, not exactly 0$"),
        ("Add", 1e-12, r"^the constant 'k' is 1e-12, not exactly 0$"),
        ("Mul", 1.000005, r"^the constant 'k' is 1.000005, not exactly 1$"),
        ("Mul", 1.0000001, r"^the constant 'k' is 1.0000001, not exactly 1$"),
        ("Div", 0.999995, r"^the constant 'k' is 0.999995, not exactly 1$"),
    ],
    ids=["x+1e-9", "x+1e-12", "x*1.000005", "x*1.0000001", "x/0.999995"],
)
def test_remove_noop_arithmetic_refuses_constants_that_are_only_close(op_type, value, reason):
    """An epsilon guard ``x + 1e-12`` is not a no-op: at x == 0 it is what keeps 1/x finite."""
    model = make_model(
        [
            node(op_type, ["x", "k"], ["a"], name="guard"),
            node("Reciprocal", ["a"], ["y"], name="inv"),
        ],
        {"x": [2, 3]},
        ["y"],
        {"k": np.float32(value)},
    )
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_refused(result, "remove-noop-arithmetic", reason, "guard")
    assert op_types(result.model)[op_type] == 1
    zeros = {"x": np.zeros((2, 3), np.float32)}
    assert_same_outputs(model, result.model, zeros)


@pytest.mark.parametrize(
    ("constant", "reason"),
    [
        (np.ones((1, 1, 1), np.float32), r"'k' of shape \[1, 1, 1\] would broadcast 'x' "
                                         r"\(rank 2\) to rank 3"),
        (np.ones((1, 3), np.float32), r"'k' has shape \[1, 3\]; only a single-element"),
    ],
    ids=["raises-the-rank", "several-elements"],
)
def test_remove_noop_arithmetic_refuses_a_one_that_is_not_a_single_element(constant, reason):
    model = then_relu(node("Mul", ["x", "k"], ["a"], name="noop"), [2, 3], {"k": constant})
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_refused(result, "remove-noop-arithmetic", reason, "noop")
    assert op_types(result.model)["Mul"] == 1
    assert_same_outputs(model, result.model)


def test_remove_noop_arithmetic_does_not_count_a_real_scale():
    """x * 0.5 is not a near miss: no report line for every scale in a model."""
    model = then_relu(node("Mul", ["x", "k"], ["a"], name="scale"), [2, 3], {"k": np.float32(0.5)})
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_not_applicable(result, "remove-noop-arithmetic")
    assert op_types(result.model)["Mul"] == 1


def test_remove_noop_arithmetic_keeps_zero_minus_x():
    model = then_relu(node("Sub", ["k", "x"], ["a"], name="neg"), [2, 3], {"k": np.float32(0)})
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_not_applicable(result, "remove-noop-arithmetic")
    assert op_types(result.model)["Sub"] == 1
    assert_same_outputs(model, result.model)


def test_remove_noop_arithmetic_keeps_a_multiplier_fed_as_graph_input():
    model = then_relu(node("Mul", ["x", "k"], ["a"], name="scale"), [2, 3], inputs={"k": []})
    result = optimize_only(model, "remove-noop-arithmetic")
    assert_not_applicable(result, "remove-noop-arithmetic")
    assert op_types(result.model)["Mul"] == 1


@in_the_pipeline_and_alone
def test_remove_noop_arithmetic_keeps_a_one_the_caller_can_override(apply):
    model = then_relu(node("Mul", ["x", "k"], ["a"], name="scale"), [2, 3], {"k": np.float32(1)})
    expose_as_input(model, "k")
    result = apply(model, "remove-noop-arithmetic")
    assert op_types(result.model)["Mul"] == 1
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "k": np.array(3.0, np.float32)})


# --- remove-noop-cast --------------------------------------------------------------------------


def test_remove_noop_cast():
    model = then_relu(node("Cast", ["x"], ["a"], name="cast", to=onnx.TensorProto.FLOAT), [2, 3])
    result = rewrite_without_folding(model, "remove-noop-cast")
    assert_fired(result, "remove-noop-cast", gone=["Cast"])
    assert_same_outputs(model, result.model)
    assert op_types(optimize_only(model, "remove-noop-cast").model) == {"Relu": 1}


@pytest.mark.parametrize("to", [onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE])
def test_remove_noop_cast_keeps_a_cast_that_changes_the_dtype(to):
    model = make_model(
        [
            node("Cast", ["x"], ["a"], name="cast", to=to),
            node("Cast", ["a"], ["y"], name="back", to=onnx.TensorProto.FLOAT),
        ],
        {"x": [2, 3]},
        ["y"],
    )
    result = rewrite_without_folding(model, "remove-noop-cast")
    assert_refused(result, "remove-noop-cast", r"types are not the same", "cast")
    assert op_types(result.model)["Cast"] == 2


# --- remove-noop-transpose ---------------------------------------------------------------------


def test_remove_noop_transpose():
    model = then_relu(node("Transpose", ["x"], ["a"], name="tr", perm=[0, 1, 2]), [2, 3, 4])
    result = optimize_only(model, "remove-noop-transpose")
    assert_fired(result, "remove-noop-transpose", gone=["Transpose"])
    assert_same_outputs(model, result.model)


def test_remove_noop_transpose_keeps_a_real_permutation():
    model = then_relu(node("Transpose", ["x"], ["a"], name="tr", perm=[0, 2, 1]), [2, 3, 4])
    result = optimize_only(model, "remove-noop-transpose")
    assert_refused(result, "remove-noop-transpose", r"Permutation is not identity", "tr")


def test_remove_noop_transpose_keeps_a_transpose_without_perm():
    """No perm reverses the axes; onnxscript's pattern needs the attribute: no match, no reason."""
    model = then_relu(node("Transpose", ["x"], ["a"], name="tr"), [2, 3])
    result = optimize_only(model, "remove-noop-transpose")
    assert result.report.rules["remove-noop-transpose"].matched == 0
    assert op_types(result.model)["Transpose"] == 1


# --- remove-noop-expand ------------------------------------------------------------------------


def test_remove_noop_expand():
    model = then_relu(
        node("Expand", ["x", "shape"], ["a"], name="expand"), [2, 3], {"shape": ints(2, 3)}
    )
    result = rewrite_without_folding(model, "remove-noop-expand")
    assert_fired(result, "remove-noop-expand", gone=["Expand"])
    assert_same_outputs(model, result.model)
    assert op_types(optimize_only(model, "remove-noop-expand").model) == {"Relu": 1}


def test_remove_noop_expand_keeps_an_expand_that_broadcasts():
    model = then_relu(
        node("Expand", ["x", "shape"], ["a"], name="expand"), [1, 3], {"shape": ints(2, 3)}
    )
    result = optimize_only(model, "remove-noop-expand")
    assert_refused(result, "remove-noop-expand", r"does not match the shape \[2, 3\]", "expand")


def test_remove_noop_expand_keeps_an_expand_to_a_run_time_shape():
    model = then_relu(
        node("Expand", ["x", "shape"], ["a"], name="expand"), [1, 3], inputs={"shape": (INT64, [2])}
    )
    result = optimize_only(model, "remove-noop-expand")
    assert_refused(result, "remove-noop-expand", r"Shape is not a constant", "expand")



def test_remove_noop_expand_keeps_an_expand_to_a_shape_the_caller_can_override():
    model = then_relu(
        node("Expand", ["x", "shape"], ["a"], name="expand"), [1, 3], {"shape": ints(1, 3)}
    )
    expose_as_input(model, "shape")
    result = optimize_only(model, "remove-noop-expand")
    assert_refused(result, "remove-noop-expand", r"Shape is not a constant", "expand")
    x = np.random.default_rng(0).standard_normal((1, 3)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "shape": ints(2, 3)})


# --- merge-transpose-chain ---------------------------------------------------------------------


def transpose_chain(perm1, perm2, *, expose_middle=False):
    outputs = ["y", "mid"] if expose_middle else ["y"]
    return make_model(
        [
            node("Transpose", ["x"], ["mid"], name="t1", perm=perm1),
            node("Transpose", ["mid"], ["t"], name="t2", perm=perm2),
            node("Relu", ["t"], ["y"], name="relu"),
        ],
        {"x": [2, 3, 4, 5]},
        outputs,
    )


def test_merge_transpose_chain_into_one_transpose():
    model = transpose_chain([1, 0, 3, 2], [0, 2, 3, 1])
    result = optimize_only(model, "merge-transpose-chain")
    assert_fired(result, "merge-transpose-chain", tagged={"t2": "merge-transpose-chain"})
    assert op_types(result.model) == {"Transpose": 1, "Relu": 1}
    assert_same_outputs(model, result.model)


def test_merge_transpose_chain_that_cancels_out():
    model = transpose_chain([0, 2, 3, 1], [0, 3, 1, 2])
    result = optimize_only(model, "merge-transpose-chain")
    assert_fired(result, "merge-transpose-chain", gone=["Transpose"])
    assert_same_outputs(model, result.model)


def test_merge_transpose_chain_refuses_a_middle_read_elsewhere():
    model = transpose_chain([1, 0, 3, 2], [0, 2, 3, 1], expose_middle=True)
    result = optimize_only(model, "merge-transpose-chain")
    assert_refused(result, "merge-transpose-chain", r"consumers outside the pattern", "t2")


def test_merge_transpose_chain_leaves_a_transpose_without_perm():
    """No reason recorded: onnxscript's pattern needs both perm attributes."""
    model = make_model(
        [
            node("Transpose", ["x"], ["mid"], name="t1"),
            node("Transpose", ["mid"], ["y"], name="t2", perm=[1, 0, 2]),
        ],
        {"x": [2, 3, 4]},
        ["y"],
    )
    result = optimize_only(model, "merge-transpose-chain")
    assert result.report.rules["merge-transpose-chain"].matched == 0
    assert op_types(result.model)["Transpose"] == 2


# --- merge-reshape-chain -----------------------------------------------------------------------


def reshape_chain(x_shape, shape1, shape2, *, expose_middle=False, **inputs):
    initializers = {"s1": ints(*shape1)}
    if shape2 is not None:
        initializers["s2"] = ints(*shape2)
    return make_model(
        [
            node("Reshape", ["x", "s1"], ["mid"], name="r1"),
            node("Reshape", ["mid", "s2"], ["y"], name="r2"),
        ],
        {"x": x_shape, **inputs},
        ["y", "mid"] if expose_middle else ["y"],
        initializers,
    )


@pytest.mark.parametrize(
    ("shape1", "shape2"), [((6, 4), (4, -1)), ((0, -1), (4, 6)), ((-1,), (3, -1))]
)
def test_merge_reshape_chain(shape1, shape2):
    model = reshape_chain([2, 3, 4], shape1, shape2)
    result = optimize_only(model, "merge-reshape-chain")
    assert_fired(result, "merge-reshape-chain", tagged={"r2": "merge-reshape-chain"})
    assert op_types(result.model) == {"Reshape": 1}
    assert_same_outputs(model, result.model)


def test_merge_reshape_chain_refuses_a_run_time_shape():
    model = reshape_chain([2, 3, 4], (6, 4), None, s2=(INT64, [2]))
    result = optimize_only(model, "merge-reshape-chain")
    assert_refused(result, "merge-reshape-chain", r"Shape is not a constant", "r2")


def test_merge_reshape_chain_refuses_zero_and_minus_one_with_unknown_dims():
    model = reshape_chain(["n", "m", 4], (0, -1), (0, -1, 2))
    result = optimize_only(model, "merge-reshape-chain")
    assert_refused(result, "merge-reshape-chain", r"both 0 and -1", "r2")


def test_merge_reshape_chain_refuses_a_middle_read_elsewhere():
    model = reshape_chain([2, 3, 4], (6, 4), (4, 6), expose_middle=True)
    result = optimize_only(model, "merge-reshape-chain")
    assert_refused(result, "merge-reshape-chain", r"consumers outside the pattern", "r2")



def test_merge_reshape_chain_refuses_a_shape_the_caller_can_override():
    """Fed [0, -1], the second Reshape copies dim 0 from the first one's output, not from x."""
    model = expose_as_input(reshape_chain([2, 3, 4], (6, 4), (4, 6)), "s2")
    result = optimize_only(model, "merge-reshape-chain")
    assert_refused(result, "merge-reshape-chain", r"Shape is not a constant", "r2")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "s2": ints(0, -1)})


# --- merge-unsqueeze-chain ---------------------------------------------------------------------


def unsqueeze_chain(axes1, axes2, *, expose_middle=False):
    return make_model(
        [
            node("Unsqueeze", ["x", "a1"], ["mid"], name="u1"),
            node("Unsqueeze", ["mid", "a2"], ["y"], name="u2"),
        ],
        {"x": [3, 4]},
        ["y", "mid"] if expose_middle else ["y"],
        {"a1": ints(*axes1), "a2": ints(*axes2)},
    )


@pytest.mark.parametrize(("axes1", "axes2"), [((0,), (2,)), ((2,), (0,)), ((1,), (1,))])
def test_merge_unsqueeze_chain(axes1, axes2):
    model = unsqueeze_chain(axes1, axes2)
    result = optimize_only(model, "merge-unsqueeze-chain")
    assert_fired(result, "merge-unsqueeze-chain", tagged={"u2": "merge-unsqueeze-chain"})
    assert op_types(result.model) == {"Unsqueeze": 1}
    assert_same_outputs(model, result.model)


def test_merge_unsqueeze_chain_refuses_negative_axes():
    result = optimize_only(unsqueeze_chain((-1,), (0,)), "merge-unsqueeze-chain")
    assert_refused(result, "merge-unsqueeze-chain", r"Axes are negative", "u2")


def test_merge_unsqueeze_chain_refuses_several_axes():
    """onnxscript only merges single axes; its reason says 'not constant' for a 2-element one."""
    result = optimize_only(unsqueeze_chain((0, 1), (0,)), "merge-unsqueeze-chain")
    assert_refused(result, "merge-unsqueeze-chain", r"Axes are not constant", "u2")


def test_merge_unsqueeze_chain_refuses_a_middle_read_elsewhere():
    result = optimize_only(unsqueeze_chain((0,), (2,), expose_middle=True), "merge-unsqueeze-chain")
    assert_refused(result, "merge-unsqueeze-chain", r"consumers outside the pattern", "u2")



def test_merge_unsqueeze_chain_refuses_axes_the_caller_can_override():
    model = expose_as_input(unsqueeze_chain((0,), (2,)), "a2")
    result = optimize_only(model, "merge-unsqueeze-chain")
    assert_refused(result, "merge-unsqueeze-chain", r"Axes are not constant", "u2")
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "a2": ints(0)})


# --- fold-pad-into-conv ------------------------------------------------------------------------


def pad_conv(pads, *, value=None, axes=None, mode=None, conv_pads=(1, 1, 1, 1), **conv):
    rng = np.random.default_rng(0)
    initializers = {"pads": ints(*pads), "w": random(rng, 4, 3, 3, 3)}
    pad_inputs = ["x", "pads"]
    if value is not None or axes is not None:
        pad_inputs.append("value" if value is not None else "")
        if value is not None:
            initializers["value"] = np.float32(value)
    if axes is not None:
        pad_inputs.append("axes")
        initializers["axes"] = ints(*axes)
    if conv_pads is not None:
        conv["pads"] = list(conv_pads)
    return make_model(
        [
            node("Pad", pad_inputs, ["padded"], name="pad", **({"mode": mode} if mode else {})),
            node("Conv", ["padded", "w"], ["y"], name="conv", **conv),
        ],
        {"x": [1, 3, 6, 6]},
        ["y"],
        initializers,
    )


@pytest.mark.parametrize(
    "pad",
    [
        {"pads": [0, 0, 1, 2, 0, 0, 2, 1]},
        {"pads": [0, 0, 1, 2, 0, 0, 2, 1], "value": 0.0},
        {"pads": [1, 2, 2, 1], "axes": [2, 3]},
        {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "conv_pads": None},
    ],
    ids=["pads", "zero-value", "axes", "unpadded-conv"],
)
def test_fold_pad_into_conv(pad):
    model = pad_conv(**pad)
    result = optimize_only(model, "fold-pad-into-conv")
    assert_fired(result, "fold-pad-into-conv", gone=["Pad"], tagged={"conv": "fold-pad-into-conv"})
    assert_same_outputs(model, result.model)


def test_fold_pad_into_conv_keeps_a_pad_another_node_still_reads():
    model = pad_conv([0, 0, 1, 1, 0, 0, 1, 1])
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("padded", onnx.TensorProto.FLOAT, None)
    )
    result = optimize_only(model, "fold-pad-into-conv")
    assert_fired(result, "fold-pad-into-conv", tagged={"conv": "fold-pad-into-conv"})
    assert op_types(result.model) == {"Pad": 1, "Conv": 1}
    conv = next(n for n in result.model.graph.node if n.op_type == "Conv")
    assert conv.input[0] == "x"
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(
    ("pad", "reason"),
    [
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": 1.0}, r"must be equal to 0"),
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "mode": "reflect"}, r"mode must be 'constant'"),
        ({"pads": [1, 0, 1, 1, 0, 0, 1, 1]}, r"must be zero in non-spatial dimensions"),
        ({"pads": [0, 0, -1, 0, 0, 0, 0, 0]}, r"must not contain negative values"),
        (
            {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "conv_pads": None, "auto_pad": "SAME_UPPER"},
            r"auto_pad must be 'NOTSET'",
        ),
    ],
    ids=["nonzero-value", "reflect", "batch-axis", "negative", "conv-auto-pad"],
)
def test_fold_pad_into_conv_refuses(pad, reason):
    model = pad_conv(**pad)
    result = optimize_only(model, "fold-pad-into-conv")
    assert_refused(result, "fold-pad-into-conv", reason, "conv")
    assert op_types(result.model)["Pad"] == 1



def test_fold_pad_into_conv_refuses_pads_the_caller_can_override():
    model = expose_as_input(pad_conv([0, 0, 1, 1, 0, 0, 1, 1]), "pads")
    result = optimize_only(model, "fold-pad-into-conv")
    assert_refused(result, "fold-pad-into-conv", r"pads is not a constant", "conv")
    assert op_types(result.model)["Pad"] == 1
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "pads": ints(0, 0, 2, 0, 0, 0, 2, 0)})


# --- recognize-hardswish -----------------------------------------------------------------------


def spelled_out(*, bias=3.0, low=0.0, high=6.0, divisor=6.0, form="hardswish", swap=False):
    """``x * Clip(x + 3, 0, 6) / 6`` (hardswish) or ``Clip(x + 3, 0, 6) / 6`` (hardsigmoid)."""
    constants = {"bias": bias, "low": low, "high": high, "divisor": divisor}
    nodes = [
        node("Add", ["bias", "x"] if swap else ["x", "bias"], ["shifted"], name="add"),
        node("Clip", ["shifted", "low", "high"], ["clipped"], name="clip"),
    ]
    if form == "hardswish":
        nodes.append(node("Mul", ["x", "clipped"] if swap else ["clipped", "x"], ["m"], name="mul"))
        nodes.append(node("Div", ["m", "divisor"], ["y"], name="div"))
    else:
        nodes.append(node("Div", ["clipped", "divisor"], ["y"], name="div"))
    initializers = {
        name: value if isinstance(value, np.ndarray) else np.float32(value)
        for name, value in constants.items()
    }
    return make_model(nodes, {"x": [2, 3, 4]}, ["y"], initializers)


def hard_sigmoid_times_x(alpha=1 / 6, beta=0.5):
    return make_model(
        [
            node("HardSigmoid", ["x"], ["h"], name="hsig", alpha=alpha, beta=beta),
            node("Mul", ["h", "x"], ["y"], name="mul"),
        ],
        {"x": [2, 3, 4]},
        ["y"],
    )


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (spelled_out(), "HardSwish"),
        (spelled_out(swap=True), "HardSwish"),
        (spelled_out(form="hardsigmoid"), "HardSigmoid"),
        (spelled_out(form="hardsigmoid", swap=True), "HardSigmoid"),
        (hard_sigmoid_times_x(), "HardSwish"),
    ],
    ids=["hardswish", "hardswish-commuted", "hardsigmoid", "hardsigmoid-commuted", "from-sigmoid"],
)
def test_recognize_hardswish(model, expected):
    result = optimize_only(model, "recognize-hardswish")
    assert_fired(result, "recognize-hardswish", gone=["Clip", "Mul"])
    assert op_types(result.model) == {expected: 1}
    assert list(rule_tags(result.model).values()) == ["recognize-hardswish"]
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize(
    ("constants", "reason"),
    [
        ({"bias": 5.0}, r"bias 'bias' is not the scalar constant 3"),
        ({"bias": 3.0003}, r"bias 'bias' is not the scalar constant 3"),
        ({"high": 5.0}, r"clip max 'high' is not the scalar constant 6"),
        ({"divisor": np.full((1, 1, 1, 1), 6, np.float32)}, r"would broadcast"),
    ],
    ids=["bias-5", "bias-3.0003", "relu5", "rank-4-divisor"],
)
@pytest.mark.parametrize("form", ["hardswish", "hardsigmoid"])
def test_recognize_hardswish_refuses_other_constants(constants, reason, form):
    model = spelled_out(form=form, **constants)
    result = optimize_only(model, "recognize-hardswish")
    assert_refused(result, "recognize-hardswish", reason, "div")
    assert_same_outputs(model, result.model)


def test_recognize_hardswish_refuses_a_hardsigmoid_with_other_parameters():
    model = hard_sigmoid_times_x(alpha=0.2)
    result = optimize_only(model, "recognize-hardswish")
    assert_refused(result, "recognize-hardswish", r"alpha=0.2.*1/6", "mul")


def test_recognize_hardswish_refuses_a_clip_read_elsewhere():
    model = spelled_out()
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("clipped", onnx.TensorProto.FLOAT, None)
    )
    result = optimize_only(model, "recognize-hardswish")
    assert_refused(result, "recognize-hardswish", r"consumers outside the pattern", "div")
    assert op_types(result.model)["Clip"] == 1
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("form", ["hardswish", "hardsigmoid"])
@in_the_pipeline_and_alone
def test_recognize_hardswish_refuses_a_bias_the_caller_can_override(form, apply):
    model = expose_as_input(spelled_out(form=form), "bias")
    result = apply(model, "recognize-hardswish")
    assert_refused(
        result, "recognize-hardswish", r"bias 'bias' is not the scalar constant 3", "div"
    )
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "bias": np.array(1.0, np.float32)})
