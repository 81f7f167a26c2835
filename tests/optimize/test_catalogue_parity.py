"""Every catalogue architecture (tiny variant) through optimize: parity and peer node counts.

Both input graphs the issue names are used: the unfused graph the dynamo exporter gives with
``optimize=False`` (every BatchNorm still there, every Conv with a computed zero bias) and the
graph edgefuse's own convert emits. Full-size models are measured by bench/optimize.py.

Parity is judged twice: by ``edgefuse.verify`` (the gate users run) and, on other seeded inputs,
by cosine and relative L2 error computed here with numpy from ONNX Runtime's outputs, so that a
bug in verify's comparison cannot hide a rewrite that changes the numbers. A perturbed copy of each
optimized model shows that this second check fails when the numbers do move.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from edgefuse.models import CATALOGUE
from edgefuse.optimize import OptimizeResult, optimize
from edgefuse.verify import verify
from tests.needs import optional
from tests.optimize.graphs import random_feeds, run_ort

pytestmark = [pytest.mark.torch, pytest.mark.ort]

torch = optional("torch")

# verify's FP32 gate. Folding BN in float64 leaves a relative L2 error near 1e-6 on these models;
# 1e-3 relative noise on the Conv weights gives 2e-3 to 4e-3 (cosine still above 0.99999).
MIN_COSINE = 0.99999
MAX_REL_L2 = 1e-4


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


@pytest.fixture(scope="module")
def optimized(unfused) -> tuple[str, onnx.ModelProto, OptimizeResult]:
    name, model = unfused
    return name, model, optimize(model)


def agreement(reference, candidate, seed: int) -> dict[str, tuple[float, float]]:
    """Output name -> (cosine, relative L2 error) of ``candidate`` against ``reference``."""
    feeds = random_feeds(reference, seed)
    figures = {}
    outputs = zip(run_ort(reference, feeds), run_ort(candidate, feeds), strict=True)
    for value, (want, got) in zip(reference.graph.output, outputs, strict=True):
        assert got.shape == want.shape, value.name
        want, got = want.astype(np.float64).ravel(), got.astype(np.float64).ravel()
        cosine = want @ got / (np.linalg.norm(want) * np.linalg.norm(got))
        rel_l2 = np.linalg.norm(got - want) / np.linalg.norm(want)
        figures[value.name] = (float(cosine), float(rel_l2))
    return figures


def misses(figures: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The outputs whose figures miss the gate (a NaN misses it too)."""
    return {name: (cosine, rel_l2) for name, (cosine, rel_l2) in figures.items()
            if not (cosine >= MIN_COSINE and rel_l2 <= MAX_REL_L2)}


def test_optimize_folds_every_batchnorm_with_fp32_parity(optimized):
    name, model, result = optimized
    ops = result.report.ops_after
    assert "BatchNormalization" not in ops, f"{name}: {ops}"
    assert result.report.nodes_after < result.report.nodes_before
    verdict = verify(model, result.model, min_cosine=MIN_COSINE, max_rel_l2=MAX_REL_L2)
    assert verdict.passed, f"{name}\n{verdict.render()}"


def test_optimize_is_not_bigger_than_onnxscripts_optimizer(optimized):
    import onnxscript.optimizer

    name, model, result = optimized
    peer = onnxscript.optimizer.optimize(model)
    assert len(result.model.graph.node) <= len(peer.graph.node), name


def test_optimize_keeps_output_names_and_values_on_random_inputs(optimized):
    name, model, result = optimized
    assert [o.name for o in result.model.graph.output] == [o.name for o in model.graph.output]
    for seed in (7, 8):
        figures = agreement(model, result.model, seed)
        assert set(figures) == {o.name for o in model.graph.output}
        assert misses(figures) == {}, f"{name}, seed {seed}: {figures}"


def test_the_parity_check_fails_on_a_perturbed_model(optimized):
    """Outputs 0.1% too large keep cosine 1 and only the relative L2 gate sees them; 5% noise
    on the Conv weights is what the cosine gate sees (a saturated sigmoid map, dbnet_text's,
    keeps its cosine at 0.9999975 under 1% noise, which only the relative L2 gate sees)."""
    name, model, result = optimized
    scaled = agreement(model, with_scaled_outputs(result.model, 1.001), seed=7)
    assert all(cosine >= MIN_COSINE for cosine, _ in scaled.values()), scaled
    assert set(misses(scaled)) == set(scaled), f"{name}: {scaled}"
    noisy = agreement(model, with_noisy_conv_weights(result.model, 5e-2), seed=7)
    assert any(cosine < MIN_COSINE for cosine, _ in noisy.values()), f"{name}: {noisy}"


def with_scaled_outputs(model: onnx.ModelProto, factor: float) -> onnx.ModelProto:
    """A copy whose every output is ``factor`` times what ``model`` computes."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    scale = onnx.numpy_helper.from_array(np.array(factor, np.float32), "perturb.factor")
    model.graph.initializer.append(scale)
    for index, output in enumerate(model.graph.output):
        raw = f"{output.name}.unscaled"
        for n in model.graph.node:
            n.output[:] = [raw if out == output.name else out for out in n.output]
            n.input[:] = [raw if inp == output.name else inp for inp in n.input]
        model.graph.node.append(onnx.helper.make_node(
            "Mul", [raw, scale.name], [output.name], name=f"perturb.scale{index}"))
    return model


def with_noisy_conv_weights(model: onnx.ModelProto, relative: float) -> onnx.ModelProto:
    """A copy whose Conv weights carry seeded multiplicative noise of ``relative`` std."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    rng = np.random.default_rng(0)
    weights = {n.input[1] for n in model.graph.node if n.op_type == "Conv"}
    for init in model.graph.initializer:
        if init.name in weights:
            array = onnx.numpy_helper.to_array(init)
            noisy = array * (1 + relative * rng.standard_normal(array.shape))
            init.CopyFrom(onnx.numpy_helper.from_array(noisy.astype(array.dtype), init.name))
    assert weights, "no Conv to perturb"
    return model
