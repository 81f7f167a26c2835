"""Models built to break FP16: a naive cast breaks each, quantize keeps each within the gate, and
the report names the cause.

"Naive" is judged two ways, both emulated on the host with FP16 storage: ATC's default
force_fp16 (every tensor FP16, nothing kept) and onnxruntime.transformers.float16 (the common
converter; it clamps constants to +-65504). Every quantized model is then checked on a sample the
calibration never saw.
"""

import numpy as np
import pytest

from edgefuse.quantize import quantize
from edgefuse.reference.fp16 import run_fp16_storage
from edgefuse.reference.onnx_runner import run_onnx
from tests.quantize.graphs import (
    activation_overflow,
    bn_huge_variance,
    bn_huge_variance_feeds,
    cancellation,
    cosine,
    feeds,
    force_fp16_outputs,
    large_reduction,
    ort_float16_outputs,
)

pytestmark = pytest.mark.ort

GATE = 0.999


def _samples(model, feeder, seeds):
    return [feeder(seed) if feeder else feeds(model, seed) for seed in seeds]


def _naive_cosines(model, inputs) -> tuple[float, float]:
    reference = run_onnx(model, inputs)["y"]
    return (cosine(reference, force_fp16_outputs(model, inputs)["y"]),
            cosine(reference, ort_float16_outputs(model, inputs)["y"]))


def _unseen_cosine(model, quantized, inputs) -> float:
    return cosine(run_onnx(model, inputs)["y"], run_fp16_storage(quantized, inputs)["y"])


@pytest.mark.parametrize(
    ("build", "feeder"),
    [
        (bn_huge_variance, bn_huge_variance_feeds),
        (activation_overflow, None),
        (large_reduction, None),
    ],
)
def test_naive_fp16_breaks_and_quantize_holds_the_gate(build, feeder):
    model = build()
    unseen = _samples(model, feeder, [7])[0]
    assert max(_naive_cosines(model, unseen)) < 0.99
    result = quantize(model, inputs=_samples(model, feeder, [0, 1]))
    assert result.passed
    assert min(g.cosine for g in result.report.gate) >= GATE
    assert _unseen_cosine(model, result.model, unseen) >= GATE


def test_bn_variance_beyond_fp16_is_folded_away_in_fp32_and_reported():
    model = bn_huge_variance()
    result = quantize(model, inputs=[bn_huge_variance_feeds(0)])
    [folded] = result.report.folded_constants
    assert folded.constant == "var" and folded.cause == "constant-overflow"
    assert "1e+07" in folded.detail
    assert folded.fate.startswith("folded away by optimize") and "bn-to-affine" in folded.fate
    assert result.report.keep_fp32["nodes"] == []
    assert "BatchNormalization" not in {n.op_type for n in result.model.graph.node}


def test_activation_overflow_keeps_writer_and_readers_fp32_and_says_which_tensor():
    result = quantize(activation_overflow())
    decisions = result.report.decisions
    assert decisions["conv"].rule == "activation-overflow"
    assert decisions["conv"].detail.startswith("writes 'c' reaches |x| = ")
    assert decisions["normalize"].detail.startswith("reads 'c'")
    assert {"conv", "abs", "max", "normalize"} == set(decisions)


def test_large_reduction_is_named_by_the_policy_rule():
    result = quantize(large_reduction())
    decisions = result.report.decisions
    assert decisions["sum"].rule == "large-reduction"
    assert decisions["sum"].detail == "reduces 262144 elements (limit 1024)"
    # the sum itself passes 65504, so its reader must read FP32 too
    assert decisions["scale"].rule == "activation-overflow"


def _rel_l2(reference: np.ndarray, candidate: np.ndarray) -> float:
    reference, candidate = reference.astype(np.float64), candidate.astype(np.float64)
    return float(np.linalg.norm(candidate - reference) / np.linalg.norm(reference))


def test_search_finds_the_cancellation_no_rule_predicts():
    model = cancellation()
    unseen = feeds(model, 7)
    reference = run_onnx(model, unseen)["y"]
    # What storing the FP32 output itself in FP16 costs: no FP16 model can do better.
    floor = _rel_l2(reference, reference.astype(np.float16))
    for naive in (force_fp16_outputs(model, unseen)["y"], ort_float16_outputs(model, unseen)["y"]):
        # Broken whatever the gate: ~900x the floor here (the search stops at 0.999 cosine).
        assert _rel_l2(reference, naive) > 300 * floor
        # ... and broken the way the model says: relu(conv(x)) rounded to an integer, doubled.
        assert 0.9 < np.max(np.abs(naive - reference)) <= 1.01
    policy_only = quantize(model, keep_fp32="none")
    assert not policy_only.passed and policy_only.report.search is None
    result = quantize(model)
    assert result.passed
    found = {name for name, d in result.report.decisions.items() if d.rule == "search"}
    assert found == {"add_big", "sub_big"}
    assert result.report.search["passed"] and result.report.search["evaluations"] <= 20
    # With the two kept FP32, the error is back at the floor (~2x it), on a sample not calibrated.
    quantized = run_fp16_storage(result.model, unseen)["y"]
    assert _rel_l2(reference, quantized) < 4 * floor
    assert _unseen_cosine(model, result.model, unseen) >= GATE


def test_no_keep_set_meets_the_gate_when_an_fp16_output_overflows():
    model = activation_overflow()
    model.graph.output[0].name = "c"  # the overflowing tensor is now the output itself
    del model.graph.node[1:]
    result = quantize(model)
    assert not result.passed
    assert result.report.search["passed"] is False
    assert any("--keep-io-types" in note for note in result.report.notes)
    assert quantize(model, keep_io_types=True).passed


def test_quantized_output_is_stable_across_calibration_seeds():
    # The gate is measured on calibration samples; an unseen sample must agree with it.
    model = bn_huge_variance()
    result = quantize(model, inputs=[bn_huge_variance_feeds(3)])
    cosines = [_unseen_cosine(model, result.model, bn_huge_variance_feeds(s)) for s in (11, 12)]
    assert np.min(cosines) >= GATE
