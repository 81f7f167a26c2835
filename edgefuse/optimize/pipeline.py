"""Pipelines per target: plain lists of passes and rules, run to a fixed point.

Why plain lists (TVM Relax, onnx-ir PassManager): what runs for a target is visible in one place,
there is no hidden opt-level gating, and the report says which pass ran in which round and
whether it changed anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Sequence

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleSet

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.errors import InputError, Ref
from edgefuse.optimize import passes
from edgefuse.optimize._recording import RecordingRule
from edgefuse.optimize.custom_ops import AttachCustomOpFunctions
from edgefuse.optimize.report import PassRecord, RewriteReport, RuleStats, op_counts
from edgefuse.optimize.rules import ALL_RULES, ASCEND_RULES, RULES_BY_ID

HOST_TARGETS = ("cpu", "gpu")
MAX_ROUNDS = 8


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """What one target runs: passes before the rules, the rules, passes after them."""

    target: str
    before: tuple[passes.GraphPass, ...]
    rules: tuple[type, ...]
    after: tuple[passes.GraphPass, ...]


def pipeline_for(target: str) -> Pipeline:
    """The pipeline for ``target``: 'cpu' and 'gpu' share the host rules.

    An Ascend soc (``Ascend310B4``; validated against edgefuse.acl.compile.soc) runs the host
    rules, then ASCEND_RULES, whose edgefuse custom ops then get their ONNX functions attached.
    """
    ascend = target.lower().startswith("ascend")
    if target not in HOST_TARGETS and not ascend:
        raise InputError(
            f"unknown optimize target '{target}'",
            hint=f"use one of: {', '.join(HOST_TARGETS)}, or an Ascend soc such as Ascend310B4",
            reference=Ref.UNKNOWN_TARGET,
        )
    after = (
        passes.EliminateIdentities(),
        passes.EliminateCommonSubexpressions(),
        passes.RemoveUnused(),
    )
    return Pipeline(
        target=validate_soc(target).name if ascend else target,
        # The folder leaves the nodes it bypassed in place (a Dropout it turned into Identity
        # still reads the Conv output); until they are removed they count as other consumers
        # and block every fold of the round.
        before=(passes.FoldConstants(), passes.FoldShapeArithmetic(), passes.RemoveUnused()),
        rules=ALL_RULES + ASCEND_RULES if ascend else ALL_RULES,
        after=(*after, AttachCustomOpFunctions()) if ascend else after,
    )


def select_rules(
    rules: Sequence[type], only: Sequence[str] | None, skip: Sequence[str] | None
) -> tuple[type, ...]:
    """Filter rules by id; unknown ids are a user error (a typo must not silently do nothing)."""
    for rule_id in [*(only or ()), *(skip or ())]:
        if rule_id not in RULES_BY_ID:
            raise InputError(
                f"unknown rule id '{rule_id}'",
                hint="`edgefuse rules` lists every rule id",
                reference=Ref.UNKNOWN_RULE,
            )
    selected = [r for r in rules if (not only or r.id in only) and r.id not in (skip or ())]
    return tuple(selected)


def run_pipeline(model: ir.Model, pipeline: Pipeline, rules: Sequence[type]) -> RewriteReport:
    """Run ``pipeline`` in place on ``model`` until nothing changes (at most MAX_ROUNDS)."""
    start = time.perf_counter()
    report = RewriteReport(target=pipeline.target, ops_before=op_counts(model.graph))
    report.rules = {r.id: RuleStats(r.id, r.description) for r in rules}
    recording = [
        RecordingRule(base, rule.id, report.rules[rule.id])
        for rule in rules
        for base in rule.rewrite_rules()
    ]
    rule_set = RewriteRuleSet(recording) if recording else None
    with _overridable_defaults_hidden(model.graph):
        for round_index in range(1, MAX_ROUNDS + 1):
            report.rounds = round_index
            if not _run_round(model, pipeline, rule_set, report, round_index):
                break
    passes.LiftConstants()(model)
    passes.RemoveUnused()(model)
    passes.TopologicalSort()(model)
    report.ops_after = op_counts(model.graph)
    report.seconds = time.perf_counter() - start
    return report


def _run_round(model, pipeline: Pipeline, rule_set, report: RewriteReport, index: int) -> bool:
    """One round of every pass and rule; whether anything changed."""
    modified = False
    for graph_pass in pipeline.before:
        modified |= _timed(report, graph_pass.id, index, lambda p=graph_pass: p(model))
    if rule_set is not None:
        modified |= _timed(
            report, "rewrite-rules", index, lambda: rule_set.apply_to_model(model) > 0
        )
    for graph_pass in pipeline.after:
        modified |= _timed(report, graph_pass.id, index, lambda p=graph_pass: p(model))
    return modified


@contextlib.contextmanager
def _overridable_defaults_hidden(graph: ir.Graph) -> Iterator[None]:
    """Let no pass or rule read an initializer that is also a graph input as a constant.

    From IR 4 on, such an initializer is only a default the caller may override (ONNX Runtime
    feeds it from the inputs), so folding its value would silently ignore what the caller feeds
    (OnnxSlim's "graph inputs used as weights"). edgefuse's own rules check this
    (``rule.constant_array``), but the adopted onnxscript rules (fold-pad-into-conv,
    merge-unsqueeze-chain, remove-noop-expand, ...) and onnxscript's constant folder read
    ``const_value`` directly; hiding it for the run makes every one of them see a run-time input.
    """
    hidden = [(value, value.const_value) for value in graph.inputs if value.const_value is not None]
    for value, _ in hidden:
        value.const_value = None
    try:
        yield
    finally:
        for value, tensor in hidden:
            value.const_value = tensor


def _timed(report: RewriteReport, pass_id: str, round_index: int, call) -> bool:
    start = time.perf_counter()
    modified = bool(call())
    report.passes.append(
        PassRecord(pass_id, round_index, modified, round(time.perf_counter() - start, 4))
    )
    return modified
