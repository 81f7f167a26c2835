"""remove-noop-reshape: the cases the constant folder leaves, a target spelled with 0 or -1."""

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
)

pytestmark = pytest.mark.ort


def reshape_then_relu(x_shape, target, **inputs):
    initializers = {} if target is None else {"shape": np.array(target, np.int64)}
    return make_model(
        [
            node("Reshape", ["x", "shape"], ["r"], name="reshape"),
            node("Relu", ["r"], ["y"], name="relu"),
        ],
        {"x": x_shape, **inputs},
        ["y"],
        initializers,
    )


@pytest.mark.parametrize("target", [[2, -1, 4], [0, 3, 4], [0, 0, -1], [-1, 3, 0]])
def test_remove_noop_reshape(target):
    model = reshape_then_relu([2, 3, 4], target)
    result = optimize_only(model, "remove-noop-reshape")
    assert_fired(result, "remove-noop-reshape", gone=["Reshape"])
    assert op_types(result.model) == {"Relu": 1}
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("target", [[6, 4], [2, 3, 4, 1], [3, 2, 4], [-1]])
def test_remove_noop_reshape_keeps_a_reshape_that_changes_the_shape(target):
    model = reshape_then_relu([2, 3, 4], target)
    result = optimize_only(model, "remove-noop-reshape")
    assert_not_applicable(result, "remove-noop-reshape")
    assert op_types(result.model)["Reshape"] == 1


def test_remove_noop_reshape_refuses_an_input_with_symbolic_dims():
    model = reshape_then_relu(["n", 3, 4], [0, 3, -1])
    result = optimize_only(model, "remove-noop-reshape")
    assert_refused(result, "remove-noop-reshape", r"the shape of 'x' is not static", "reshape")


def test_remove_noop_reshape_refuses_a_run_time_shape():
    model = reshape_then_relu([2, 3, 4], None, shape=(onnx.TensorProto.INT64, [3]))
    result = optimize_only(model, "remove-noop-reshape")
    assert_refused(
        result, "remove-noop-reshape", r"shape 'shape' is not constant \(a graph input\)", "reshape"
    )


@in_the_pipeline_and_alone
def test_remove_noop_reshape_refuses_a_shape_the_caller_can_override(apply):
    model = expose_as_input(reshape_then_relu([2, 3, 4], [2, -1, 4]), "shape")
    result = apply(model, "remove-noop-reshape")
    assert_refused(
        result, "remove-noop-reshape", r"shape 'shape' is not constant \(a graph input\)", "reshape"
    )
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert_same_outputs(model, result.model, {"x": x, "shape": np.array([4, 3, 2], np.int64)})
