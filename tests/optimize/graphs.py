"""Tiny graphs and an ONNX Runtime oracle shared by the optimize tests.

Why an oracle: a rewrite that changes the arithmetic must be caught by numbers, not by reading the
rewritten structure, so every positive test compares ONNX Runtime's outputs before and after on
seeded random inputs, with ORT's own graph optimizations off so that "before" is the reference.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx.helper as oh
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnxscript.rewriter import RewriteRuleSet

from edgefuse.optimize import OptimizeResult, optimize, passes, provenance
from edgefuse.optimize._recording import RecordingRule
from edgefuse.optimize.pipeline import Pipeline, run_pipeline
from edgefuse.optimize.report import RewriteReport, RuleStats, op_counts
from edgefuse.optimize.rules import RULES_BY_ID

OPSET = 18
IR_VERSION = 8
RULE_TAG = "edgefuse.rule"
SYMBOLIC_DIM_SIZE = 2  # what a named dimension becomes in the random inputs

node = oh.make_node


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int | str] | tuple[int, Sequence[int | str]]],
    outputs: Sequence[str] | Mapping[str, Sequence[int | str]],
    initializers: Mapping[str, np.ndarray] | None = None,
    *,
    opset: int = OPSET,
) -> onnx.ModelProto:
    """A checked model; output types come from ONNX shape inference, as an exporter's would.

    ``inputs`` maps a name to a float tensor's shape, or to ``(onnx elem type, shape)``;
    ``outputs`` names float outputs, or maps them to shapes inference cannot work out.
    """
    output_shapes = outputs if isinstance(outputs, Mapping) else dict.fromkeys(outputs)
    graph = oh.make_graph(
        list(nodes),
        "test",
        [_value_info(name, spec) for name, spec in inputs.items()],
        [_value_info(name, shape) for name, shape in output_shapes.items()],
        [
            onnx.numpy_helper.from_array(np.asarray(v), name)
            for name, v in (initializers or {}).items()
        ],
    )
    model = oh.make_model(graph, ir_version=IR_VERSION, opset_imports=[oh.make_opsetid("", opset)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model


def _value_info(name: str, spec) -> onnx.ValueInfoProto:
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], int):
        return oh.make_tensor_value_info(name, spec[0], spec[1])
    return oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, spec)


def expose_as_input(model: onnx.ModelProto, *names: str) -> onnx.ModelProto:
    """List initializers as graph inputs too: from IR 4 on, defaults the caller may override."""
    initializers = {init.name: init for init in model.graph.initializer}
    for name in names:
        init = initializers[name]
        model.graph.input.append(oh.make_tensor_value_info(name, init.data_type, list(init.dims)))
    onnx.checker.check_model(model, full_check=True)
    return model


def initializer_array(model: onnx.ModelProto, name: str) -> np.ndarray:
    (init,) = [init for init in model.graph.initializer if init.name == name]
    return onnx.numpy_helper.to_array(init)


def as_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float32 initializer, input and output stored as float16."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            array = onnx.numpy_helper.to_array(init).astype(np.float16)
            init.CopyFrom(onnx.numpy_helper.from_array(array, init.name))
    for value in [*model.graph.input, *model.graph.output]:
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model


def random(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def positive(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Values in [0.5, 1.5): BatchNorm variances and scales that keep the arithmetic well scaled."""
    return (rng.random(shape) + 0.5).astype(np.float32)


def bn_params(rng: np.random.Generator, channels: int, prefix: str = "bn") -> dict[str, np.ndarray]:
    return {
        f"{prefix}.scale": positive(rng, channels),
        f"{prefix}.bias": random(rng, channels),
        f"{prefix}.mean": random(rng, channels),
        f"{prefix}.var": positive(rng, channels),
    }


def bn_node(x: str, y: str, prefix: str = "bn", **attributes) -> onnx.NodeProto:
    names = [f"{prefix}.{part}" for part in ("scale", "bias", "mean", "var")]
    return node("BatchNormalization", [x, *names], [y], name=prefix, **attributes)


def optimize_only(model: onnx.ModelProto, *rule_ids: str) -> OptimizeResult:
    """The host pipeline with only ``rule_ids`` enabled, so that no other rule hides an effect."""
    return optimize(model, only=list(rule_ids))


def rewrite_without_folding(model: onnx.ModelProto, rule_id: str) -> OptimizeResult:
    """Run one rule without the constant folder, which would otherwise remove its target first."""
    rules = (RULES_BY_ID[rule_id],)
    pipeline = Pipeline("cpu", before=(), rules=rules, after=(passes.EliminateIdentities(),))
    ir_model = ir.serde.deserialize_model(model)
    report = run_pipeline(ir_model, pipeline, rules)
    return OptimizeResult(ir.serde.serialize_model(ir_model), report)


def rewrite_alone(model: onnx.ModelProto, rule_id: str) -> OptimizeResult:
    """Apply one rule with nothing of the pipeline around it: no folder, no elimination, and no
    hiding of overridable defaults, so that the rule's own guards are what a test exercises."""
    rule = RULES_BY_ID[rule_id]
    ir_model = ir.serde.deserialize_model(model)
    report = RewriteReport(target="cpu", ops_before=op_counts(ir_model.graph))
    stats = report.rules[rule_id] = RuleStats(rule_id, rule.description)
    recording = [RecordingRule(base, rule_id, stats) for base in rule.rewrite_rules()]
    RewriteRuleSet(recording).apply_to_model(ir_model)
    return OptimizeResult(ir.serde.serialize_model(ir_model), report)


# The pipeline hides overridable defaults from every pass and rule; each edgefuse rule must still
# refuse them on its own, so the tests of that refusal run both ways.
in_the_pipeline_and_alone = pytest.mark.parametrize(
    "apply", [optimize_only, rewrite_alone], ids=["pipeline", "rule-alone"]
)


def op_types(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def rule_tags(model: onnx.ModelProto) -> dict[str, str]:
    """Node name -> the rule id it is tagged with, for every tagged node."""
    return {
        n.name: prop.value
        for n in model.graph.node
        for prop in n.metadata_props
        if prop.key == RULE_TAG
    }


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    initializers = {init.name for init in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = [
            d.dim_value if d.HasField("dim_value") else SYMBOLIC_DIM_SIZE
            for d in value.type.tensor_type.shape.dim
        ]
        dtype = oh.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        feeds[value.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(feeds))


def assert_same_outputs(
    before: onnx.ModelProto, after: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None
) -> None:
    feeds = random_feeds(before) if feeds is None else feeds
    expected, actual = run_ort(before, feeds), run_ort(after, feeds)
    assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]
    for want, got in zip(expected, actual, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def assert_fired(
    result: OptimizeResult,
    rule_id: str,
    *,
    gone: Iterable[str] = (),
    tagged: Mapping[str, str] | None = None,
) -> None:
    """The rule applied, the ops in ``gone`` left the graph, and ``tagged`` are its new nodes."""
    stats = result.report.rules[rule_id]
    assert stats.applied >= 1, f"{rule_id} did not fire; rejected: {stats.rejected}"
    remaining = op_types(result.model)
    for op in gone:
        assert remaining[op] == 0, f"{op} still in the graph: {remaining}"
    if tagged is not None:
        tags = rule_tags(result.model)
        assert tags == dict(tagged), f"tagged nodes: {tags}"
    assert_provenance(result.model, rule_id)


def assert_provenance(model: onnx.ModelProto, rule_id: str) -> None:
    """What the rule did is on record: every node it built names the rule last in its chain and
    the original nodes it stands for (its own name among them when it kept one), or, when it
    left no node behind, the model lists what it removed."""
    built = [n for n in model.graph.node if provenance.rules(n)[-1:] == [rule_id]]
    for made in built:
        origins = provenance.origins(made)
        assert origins, f"{made.name} records no origin"
        assert "/" in made.name or made.name in origins, (made.name, origins)
    if not built:
        assert rule_id in provenance.removed(model).values(), provenance.removed(model)


def assert_not_applicable(result: OptimizeResult, rule_id: str) -> None:
    """The rule did not fire and did not count the node as a match: its premise did not hold."""
    stats = result.report.rules[rule_id]
    assert stats.applied == 0 and stats.matched == 0, stats.rejected
    assert rule_tags(result.model) == {}


def assert_refused(result: OptimizeResult, rule_id: str, reason: str, node_name: str) -> None:
    """The rule did not fire, and the report gives ``node_name`` a reason matching ``reason``."""
    stats = result.report.rules[rule_id]
    assert stats.applied == 0
    assert node_name in stats.rejected, f"{node_name} not in {stats.rejected}"
    assert re.search(reason, stats.rejected[node_name]), stats.rejected[node_name]
    assert rule_tags(result.model) == {}
