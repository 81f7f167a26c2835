"""Every catalogue architecture (tiny variant) through optimize: parity and peer node counts.

Both input graphs the issue names are used: the unfused graph the dynamo exporter gives with
``optimize=False`` (every BatchNorm still there, every Conv with a computed zero bias) and the
graph edgefuse's own convert emits. Full-size models are measured by bench/optimize.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from edgefuse.models import CATALOGUE
from edgefuse.optimize import optimize
from edgefuse.verify import verify
from tests.needs import optional

pytestmark = [pytest.mark.torch, pytest.mark.ort]

torch = optional("torch")


def _unfused_dynamo_graph(name: str) -> onnx.ModelProto:
    entry = CATALOGUE[name]
    module = entry.build("tiny")
    example = torch.randn(*entry.tiny_input_shape, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (example,), dynamo=True, optimize=False, verbose=False)
    return program.model_proto


@pytest.fixture(scope="module", params=sorted(CATALOGUE))
def unfused(request) -> tuple[str, onnx.ModelProto]:
    return request.param, _unfused_dynamo_graph(request.param)


def test_optimize_folds_every_batchnorm_with_fp32_parity(unfused):
    name, model = unfused
    result = optimize(model)
    ops = result.report.ops_after
    assert "BatchNormalization" not in ops, f"{name}: {ops}"
    assert result.report.nodes_after < result.report.nodes_before
    verdict = verify(model, result.model, min_cosine=0.99999, max_rel_l2=1e-4)
    assert verdict.passed, f"{name}\n{verdict.render()}"


def test_optimize_is_not_bigger_than_onnxscripts_optimizer(unfused):
    import onnxscript.optimizer

    name, model = unfused
    ours = len(optimize(model).model.graph.node)
    peer = onnxscript.optimizer.optimize(model)
    assert ours <= len(peer.graph.node), name


def test_optimize_keeps_output_names_and_values_on_random_inputs(unfused):
    name, model = unfused
    result = optimize(model)
    assert [o.name for o in result.model.graph.output] == [o.name for o in model.graph.output]
    verdict = verify(model, result.model, seed=7)
    assert all(np.isfinite(o.cosine) for o in verdict.outputs), name
