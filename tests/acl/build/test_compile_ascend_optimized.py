"""A model the Ascend optimizer rewrote (SiLU -> edgefuse Swish) compiles as it is.

The custom nodes reach ATC in the default domain its parser plugins claim (one opset import, no
E16005), and the prepare parity gate runs them through their decompositions on the host.
"""

from __future__ import annotations

import onnx
import pytest

from edgefuse.acl.build.compile import compile_model
from edgefuse.convert import convert
from edgefuse.models import CATALOGUE
from edgefuse.optimize import optimize
from edgefuse.verify import verify
from tests.acl.models import hide_atc
from tests.needs import optional

pytestmark = [pytest.mark.torch, pytest.mark.ort]

optional("torch")


def test_swish_rewritten_yolov8n_compiles_with_parity(monkeypatch, tmp_path):
    hide_atc(monkeypatch)
    entry = CATALOGUE["yolov8n"]
    source = convert(entry.build("tiny"), inputs={"input": entry.tiny_input_shape})
    rewritten = optimize(source, target="Ascend310B4")
    assert rewritten.report.ops_after.get("edgefuse::Swish", 0) > 0
    path = tmp_path / "ascend.onnx"
    onnx.save(rewritten.model, path)

    result = compile_model(path, "Ascend310B4", tmp_path / "build")

    assert result.prepared.parity["checked"] and result.prepared.parity["min_cosine"] >= 0.99999
    prepared = onnx.load(tmp_path / "build" / "model.onnx")
    assert [(e.domain, e.version) for e in prepared.opset_import] == [("", 13)]  # Softmax(axis=1)
    assert not prepared.functions
    assert any(node.op_type == "Swish" and node.domain == "" for node in prepared.graph.node)
    assert verify(source, rewritten.model).passed


def test_rules_leave_the_custom_ops_own_decompositions_alone():
    entry = CATALOGUE["yolov8n"]
    source = convert(entry.build("tiny"), inputs={"input": entry.tiny_input_shape})
    once = optimize(source, target="Ascend310B4").model
    twice = optimize(once, target="Ascend310B4")

    swish = [f for f in twice.model.functions if f.domain == "edgefuse" and f.name == "Swish"]
    assert len(swish) == 1
    assert {node.op_type for node in swish[0].node} >= {"Mul", "Sigmoid"}
    assert "Swish" not in {node.op_type for node in swish[0].node}
    assert twice.report.rules["silu-to-swish"].rejected == {}
