"""Running onnxscript rewrite rules while recording what each one did and why it refused.

Why: onnxscript's ``apply_to_model`` returns a bare count, and its only window into refusals is a
debugging tracer that disables rewriting. Users need both at once ("why didn't my BatchNorm fold?",
onnxscript #1491/#1812), so each rule is wrapped: the wrapper observes every match attempt, keeps
the reason of each refusal per node, tags the nodes it creates with the rule id, keeps names
traceable (a fused node takes the name of the node it replaces, and records every original node
it stands for: ``edgefuse.optimize.provenance``) and makes the names of new
initializers unique, because onnxscript would otherwise overwrite an existing initializer of the
same name.

Every replacement is also checked against the schemas of the opset the model imports before it
is applied: a rule may build an op that only exists in a newer opset (HardSwish is opset 14; a
Paddle or older PyTorch export is often 11-13), or spell an op the newer way (Unsqueeze's axes as
an input from opset 13). Such a rewrite is refused, with the reason in the report, instead of
leaving a model that no runtime loads.
"""

from __future__ import annotations

import itertools

import onnx
import onnx.checker
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, MatchStatus, RewriteRule

from edgefuse.acl.ops.spec import DOMAIN
from edgefuse.optimize.provenance import ir_node_key, record_rewrite
from edgefuse.optimize.report import RuleStats
from edgefuse.optimize.rule import NOT_APPLICABLE

RULE_TAG = "edgefuse.rule"

# The matcher's own words when a matched node's output is read outside the pattern (pinned by
# tests/optimize/test_engine.py, so an onnxscript upgrade that rewords it fails loudly).
_OTHER_USES = "Matched nodes have other uses preventing replacement."
_OTHER_USES_REASON = "an intermediate value has consumers outside the pattern"


class _Observer:
    """Duck-typed stand-in for onnxscript's MatchingTracer that files outcomes into RuleStats."""

    def __init__(self, stats: RuleStats) -> None:
        self.stats = stats

    def log(self, rule, container, node: ir.Node, match: MatchResult, status: MatchStatus) -> None:
        del rule, container
        if status == MatchStatus.CONDITION_FAILED and (match.reason or "").startswith(
            NOT_APPLICABLE
        ):
            return
        if status == MatchStatus.CONDITION_FAILED:
            self.stats.reject(ir_node_key(node), match.reason or "the rule's check refused")
        elif status == MatchStatus.REPLACEMENT_FAILED:
            self.stats.reject(ir_node_key(node),
                              match.reason or "the replacement could not be built")
        elif status == MatchStatus.NO_MATCH and match is not None and match.reason == _OTHER_USES:
            self.stats.reject(ir_node_key(node), _OTHER_USES_REASON)


class RecordingRule(RewriteRule):
    """An onnxscript rule that reports to ``stats`` and tags what it creates with ``rule_id``."""

    def __init__(self, base: RewriteRule, rule_id: str, stats: RuleStats) -> None:
        # Take over the base rule's state rather than re-deriving it from private constructors.
        self.__dict__.update(vars(base))
        self.name = rule_id
        self.rule_id = rule_id
        self.stats = stats
        self._observer = _Observer(stats)

    def try_rewrite(self, model, graph_or_function, node, *, verbose=None, tracer=None):
        del tracer  # the caller's tracer would disable rewriting; ours only observes
        if isinstance(graph_or_function, ir.Function) and graph_or_function.domain == DOMAIN:
            # The decomposition of an edgefuse custom op defines that op: rewriting its body
            # (x * sigmoid(alpha * x) inside Swish) into the op itself would make it recursive.
            return None
        delta = super().try_rewrite(
            model, graph_or_function, node, verbose=verbose, tracer=self._observer
        )
        if delta is None:
            return None
        problem = _invalid_at_opset(delta.new_nodes, graph_or_function.opset_imports, model)
        if problem is not None:
            self.stats.reject(ir_node_key(node), problem)
            return None
        self.stats.apply(ir_node_key(node))
        record_rewrite(model, delta.match.nodes, delta.new_nodes, self.rule_id)
        _name_new_nodes(delta.new_nodes, delta.match.nodes, node, self.rule_id)
        _uniquify_initializers(delta.new_initializers, graph_or_function)
        for new_node in delta.new_nodes:
            new_node.metadata_props[RULE_TAG] = self.rule_id
        return delta


def _invalid_at_opset(new_nodes, opset_imports, model: ir.Model) -> str | None:
    """Why the replacement is not valid ONNX at the model's opsets, or None when it is."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version
    context.opset_imports = {domain or "": version for domain, version in opset_imports.items()}
    for new_node in new_nodes:
        if new_node.domain not in ("", "ai.onnx"):
            continue  # custom ops (edgefuse's) carry their own schema and function
        # Nodes and values the rewrite creates get their names only when it is applied.
        proto = onnx.helper.make_node(
            new_node.op_type,
            ["" if v is None else (v.name or f"_in{i}") for i, v in enumerate(new_node.inputs)],
            [v.name or f"_out{i}" for i, v in enumerate(new_node.outputs)],
            domain=new_node.domain,
        )
        proto.attribute.extend(ir.serde.serialize_attribute(a)
                               for a in new_node.attributes.values())
        try:
            onnx.checker.check_node(proto, context)
        except onnx.checker.ValidationError as exc:
            opset = context.opset_imports.get("", "?")
            first = str(exc).strip().splitlines()[0]
            return (f"the replacement {new_node.op_type} is not valid at the model's opset "
                    f"{opset} ({first})")
    return None


def _name_new_nodes(new_nodes, matched_nodes, root: ir.Node, rule_id: str) -> None:
    """Give each new node the name of the matched node it stands for, so layers stay traceable.

    A new node takes the name of a matched node of the same op type (a Conv that absorbed a
    BatchNorm stays that Conv); otherwise the last new node, which produces the replacement's
    output, takes the name of the root of the match (its output node), and helpers such as a new
    Constant get a name derived from it.
    """
    names_by_type: dict[str, list[str]] = {}
    for matched in matched_nodes:
        if matched.name:
            names_by_type.setdefault(matched.op_type, []).append(matched.name)
    names = [
        candidates.pop(0) if (candidates := names_by_type.get(n.op_type)) else None
        for n in new_nodes
    ]
    root_name = root.name or rule_id
    if names and names[-1] is None and root_name not in names:
        names[-1] = root_name
    for index, (new_node, name) in enumerate(zip(new_nodes, names, strict=True)):
        new_node.name = name if name is not None else f"{root_name}/{rule_id}_{index}"


def _uniquify_initializers(new_initializers, graph_or_function) -> None:
    if not isinstance(graph_or_function, ir.Graph):
        return
    existing = graph_or_function.initializers
    for value in new_initializers:
        base = value.name or "folded"
        name, counter = base, itertools.count(1)
        while name in existing:
            name = f"{base}_{next(counter)}"
        value.name = name
        if value.const_value is not None:
            value.const_value.name = name
