"""A rule never leaves an op the model's opset does not have (Paddle and older PyTorch export at
opsets 11-13; HardSwish exists from opset 14)."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.optimize import optimize
from tests.optimize.graphs import (
    assert_fired,
    assert_refused,
    assert_same_outputs,
    make_model,
    node,
    op_types,
)

pytestmark = pytest.mark.ort


def _spelled_out_hardswish(opset: int):
    nodes = [node("Add", ["x", "three"], ["a"], name="add"),
             node("Clip", ["a", "zero", "six"], ["c"], name="clip"),
             node("Mul", ["x", "c"], ["m"], name="mul"),
             node("Div", ["m", "six_again"], ["y"], name="hardswish")]
    constants = {"three": np.float32(3), "zero": np.float32(0), "six": np.float32(6),
                 "six_again": np.float32(6)}
    return make_model(nodes, {"x": [1, 8]}, ["y"], constants, opset=opset)


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_hardswish_is_not_created_below_opset_14(opset):
    model = _spelled_out_hardswish(opset)
    result = optimize(model)
    assert op_types(result.model)["HardSwish"] == 0
    assert_refused(result, "recognize-hardswish",
                   f"HardSwish is not valid at the model's opset {opset}", "hardswish")
    assert_same_outputs(model, result.model)
    assert "not valid at the model's opset" in result.report.render()


def test_hardswish_is_created_from_opset_14():
    model = _spelled_out_hardswish(14)
    result = optimize(model)
    assert_fired(result, "recognize-hardswish", gone=("Clip", "Div"))
    assert_same_outputs(model, result.model)
