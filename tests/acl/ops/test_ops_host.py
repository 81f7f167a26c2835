"""Host execution of models carrying edgefuse ops: attaching and inlining the decompositions.

The cases that broke in practice: a bare edgefuse node (no function), a model below opset 18
(function and model must import the same opset), an attribute left at its default (onnx.inliner
does not fill function defaults), and an edgefuse op this version does not know.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from edgefuse.acl.ops.host import attach_functions, inline_custom_ops
from edgefuse.acl.ops.swish.spec import SWISH
from edgefuse.errors import InputError
from tests.acl.ops.ops_testing import run_ort

pytestmark = pytest.mark.ort


def bare_swish_model(opset: int, **attributes) -> onnx.ModelProto:
    """Swish then Relu, the Swish node as a hand-written exporter would leave it."""
    graph = oh.make_graph(
        [oh.make_node("Swish", ["x"], ["s"], domain="edgefuse", **attributes),
         oh.make_node("Relu", ["s"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5])],
    )
    opsets = [oh.make_opsetid("", opset), oh.make_opsetid("edgefuse", 1)]
    return oh.make_model(graph, ir_version=10, opset_imports=opsets)


X = np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)


def expected(alpha=1.0):
    return np.maximum(SWISH.reference([X], alpha=alpha)[0], 0)


@pytest.mark.parametrize("opset", [13, 18, 20])
def test_a_bare_node_runs_after_inlining_whatever_the_model_opset(opset):
    inlined = inline_custom_ops(bare_swish_model(opset))
    assert not inlined.functions and {o.domain for o in inlined.opset_import} == {""}
    assert max(o.version for o in inlined.opset_import) == max(opset, 18)
    np.testing.assert_allclose(run_ort(inlined, {"x": X})[0], expected(), rtol=1e-5, atol=2e-6)


def test_raising_an_old_model_to_the_function_opset_says_nothing_to_the_user(caplog):
    # onnxscript's converter warns that it hands over to onnx's below its range: not the user's
    # concern, and it printed twice per `edgefuse compile` of a Swish model.
    caplog.set_level(logging.WARNING)
    inline_custom_ops(bare_swish_model(13))
    assert [r.getMessage() for r in caplog.records if r.name.startswith("onnxscript")] == []


def test_attached_functions_run_directly_and_defaults_are_written_out():
    attached = attach_functions(bare_swish_model(13))
    onnx.checker.check_model(attached, full_check=True)
    (swish,) = [n for n in attached.graph.node if n.domain == "edgefuse"]
    assert {a.name: a.f for a in swish.attribute} == {"alpha": 1.0}
    assert [f.name for f in attached.functions] == ["Swish"]
    np.testing.assert_allclose(run_ort(attached, {"x": X})[0], expected(), rtol=1e-5, atol=2e-6)
    # plain onnx.inliner works on it too, because no attribute is left to a function default
    inlined = onnx.inliner.inline_local_functions(attached)
    np.testing.assert_allclose(run_ort(inlined, {"x": X})[0], expected(), rtol=1e-5, atol=2e-6)


def test_an_explicit_attribute_is_kept():
    inlined = inline_custom_ops(bare_swish_model(18, alpha=1.702))
    np.testing.assert_allclose(run_ort(inlined, {"x": X})[0], expected(1.702), rtol=1e-5,
                               atol=2e-6)


def test_a_model_without_custom_ops_comes_back_unchanged():
    model = oh.make_model(
        oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]),
        opset_imports=[oh.make_opsetid("", 11)],
    )
    assert inline_custom_ops(model) == model and inline_custom_ops(model) is not model


def test_an_unknown_edgefuse_op_is_a_user_error():
    model = bare_swish_model(18)
    model.graph.node[0].op_type = "Mish"
    with pytest.raises(InputError, match="edgefuse::Mish, which this edgefuse does not know"):
        inline_custom_ops(model)


def test_a_bad_attribute_on_a_node_is_a_user_error():
    with pytest.raises(InputError, match="Swish has no attribute beta"):
        inline_custom_ops(bare_swish_model(18, beta=2.0))
