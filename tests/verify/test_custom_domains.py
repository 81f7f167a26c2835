"""Models with custom-domain nodes: verify runs what it can (edgefuse's ops through their
decompositions) and says plainly what it cannot; optimize says which nodes it passed through."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from edgefuse.acl.ops.host import attach_functions
from edgefuse.cli.main import main
from edgefuse.optimize import optimize
from edgefuse.verify import verify

pytestmark = pytest.mark.ort


def _model(op_node: onnx.NodeProto, domain: str) -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["r"], name="relu"), op_node], "custom",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 3, 3])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 3, 3])])
    return oh.make_model(graph, ir_version=8, opset_imports=[oh.make_opsetid("", 17),
                                                             oh.make_opsetid(domain, 1)])


def test_an_unknown_domain_is_a_user_error_naming_the_nodes(tmp_path, capsys):
    model = _model(oh.make_node("Mystery", ["r"], ["y"], name="mystery", domain="acme"), "acme")
    path = tmp_path / "acme.onnx"
    onnx.save(model, path)
    assert main(["verify", str(path), str(path)]) == 2
    err = capsys.readouterr().err
    assert "error[unknown-op-domain]: ONNX Runtime has no kernel for 1 node(s) of domain(s) acme" \
        in err
    assert "mystery (acme::Mystery)" in err and "Traceback" not in err


def test_optimize_says_which_custom_nodes_it_passed_through():
    model = _model(oh.make_node("Mystery", ["r"], ["y"], name="mystery", domain="acme"), "acme")
    result = optimize(model)
    assert [n.op_type for n in result.model.graph.node] == ["Relu", "Mystery"]
    assert result.report.notes == [
        "1 node(s) of custom domains passed through unchanged (acme::Mystery x1): no rule "
        "rewrites them or folds across them, and verify runs them only if they carry an ONNX "
        "function"]
    assert "note: 1 node(s) of custom domains" in result.report.render()


def test_edgefuse_ops_verify_through_their_decompositions():
    swish = attach_functions(_model(
        oh.make_node("Swish", ["r"], ["y"], name="swish", domain="edgefuse", alpha=1.0),
        "edgefuse"))
    spelled = _model(oh.make_node("Mul", ["r", "s"], ["y"], name="mul"), "edgefuse")
    spelled.graph.node.insert(1, oh.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"))
    result = verify(spelled, swish)
    assert result.passed and result.outputs[0].cosine == pytest.approx(1.0)
    assert optimize(swish).report.notes == []
    assert np.isfinite(result.outputs[0].max_abs_error)
