"""A model the Ascend optimizer rewrote (SiLU -> edgefuse Swish) compiles as it is, or without
custom ops.

The custom nodes reach ATC in the default domain its parser plugins claim (one opset import, no
E16005), and the prepare parity gate runs them through their decompositions on the host. The
build records that ATC needs edgefuse's op package for them; --no-custom-ops gives a model with
no custom node at all, whose outputs match the rewritten model's.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.ops.host import inline_custom_ops
from edgefuse.convert import convert
from edgefuse.models import CATALOGUE
from edgefuse.optimize import optimize
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.verify import verify
from tests.acl.models import hide_atc
from tests.needs import optional

pytestmark = [pytest.mark.torch, pytest.mark.ort]

optional("torch")


@pytest.fixture(scope="module")
def yolov8n():
    """(converted source, its Ascend310B4 rewrite)."""
    entry = CATALOGUE["yolov8n"]
    source = convert(entry.build("tiny"), inputs={"input": entry.tiny_input_shape})
    return source, optimize(source, target="Ascend310B4")


def test_swish_rewritten_yolov8n_compiles_with_parity(monkeypatch, tmp_path, yolov8n):
    hide_atc(monkeypatch)
    source, rewritten = yolov8n
    swish_nodes = rewritten.report.ops_after.get("edgefuse::Swish", 0)
    assert swish_nodes > 0
    path = tmp_path / "ascend.onnx"
    onnx.save(rewritten.model, path)

    result = compile_model(path, "Ascend310B4", tmp_path / "build")

    assert result.prepared.parity["checked"] and result.prepared.parity["min_cosine"] >= 0.99999
    prepared = onnx.load(tmp_path / "build" / "model.onnx")
    assert [(e.domain, e.version) for e in prepared.opset_import] == [("", 13)]  # Softmax(axis=1)
    assert not prepared.functions
    assert any(node.op_type == "Swish" and node.domain == "" for node in prepared.graph.node)
    assert verify(source, rewritten.model).passed
    record = json.loads((tmp_path / "build" / "manifest.json").read_text())["custom_ops"]
    assert record["required"] and record["ops"][0]["ascend_type"] == "EdgefuseSwish"
    assert record["ops"][0]["nodes"] == swish_nodes
    assert record["build"] == "edgefuse ops build --soc Ascend310B4 --ops Swish -o OPP_DIR"
    script = (tmp_path / "build" / "compile.sh").read_text()
    assert script.index("edgefuse_check_custom_ops\n") < script.index("atc \\")


def test_no_custom_ops_gives_a_model_without_them_and_the_same_outputs(monkeypatch, tmp_path,
                                                                       yolov8n):
    hide_atc(monkeypatch)
    _, rewritten = yolov8n
    path = tmp_path / "ascend.onnx"
    onnx.save(rewritten.model, path)

    result = compile_model(path, "Ascend310B4", tmp_path / "build", custom_ops=False)

    prepared = onnx.load(tmp_path / "build" / "model.onnx")
    assert all(node.domain in ("", "ai.onnx") for node in prepared.graph.node)
    assert "Swish" not in {node.op_type for node in prepared.graph.node}
    assert [e.domain for e in prepared.opset_import] == [""] and not prepared.functions
    assert result.decomposed == {"Swish": rewritten.report.ops_after["edgefuse::Swish"]}
    assert result.manifest.extra["custom_ops"]["required"] is False
    assert result.prepared.parity["checked"]
    feeds = random_feeds(input_specs(prepared), seed=3)
    expected = run_onnx(inline_custom_ops(rewritten.model), feeds)
    actual = run_onnx(prepared, feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-4, atol=1e-4)


def test_rules_leave_the_custom_ops_own_decompositions_alone(yolov8n):
    once = yolov8n[1].model
    twice = optimize(once, target="Ascend310B4")

    swish = [f for f in twice.model.functions if f.domain == "edgefuse" and f.name == "Swish"]
    assert len(swish) == 1
    assert {node.op_type for node in swish[0].node} >= {"Mul", "Sigmoid"}
    assert "Swish" not in {node.op_type for node in swish[0].node}
    assert twice.report.rules["silu-to-swish"].rejected == {}
