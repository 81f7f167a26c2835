"""Provenance of a rewrite: which nodes of the original model each node of the result stands for.

Why: a fused node keeps one name (a Conv that absorbed a BatchNorm stays that Conv), so without
a record nobody can tell that it also does the BatchNorm's work, nor what that fold bought.
``edgefuse profile --compare`` attributes the time each rule saved through this record.

Where it lives, in the model itself so that it travels with the file:
- each node a rule creates carries ``edgefuse.origin`` (a JSON list of the names of the original
  nodes it replaces, producers first, expanded through earlier rewrites, so a chain of folds
  still points at the nodes of the model optimize was given) and ``edgefuse.rules`` (a JSON list
  of the rule ids that built it, in the order they fired);
- nodes a rule removed outright (a Dropout, a no-op Reshape: nothing or an Identity left) are
  listed in the model's ``edgefuse.removed`` metadata: original node name -> rule id (JSON).
A node without ``edgefuse.origin`` is its own origin. Unnamed nodes are named as the report
names them: ``<unnamed OP -> FIRST_OUTPUT>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import onnx
import onnx_ir as ir

ORIGIN_TAG = "edgefuse.origin"
RULES_TAG = "edgefuse.rules"
REMOVED_KEY = "edgefuse.removed"


def node_key(name: str, op_type: str, first_output: str) -> str:
    """A node's name; an unnamed node is told apart by its (graph-unique) first output."""
    return name or f"<unnamed {op_type} -> {first_output}>"


def ir_node_key(node: ir.Node) -> str:
    return node_key(node.name or "", node.op_type, node.outputs[0].name or "")


def ir_origins(node: ir.Node) -> list[str]:
    """The original nodes an IR node stands for (itself when no rule made it)."""
    recorded = node.metadata_props.get(ORIGIN_TAG)
    return json.loads(recorded) if recorded else [ir_node_key(node)]


def record_rewrite(model: ir.Model, matched: Iterable[ir.Node], new_nodes: Iterable[ir.Node],
                   rule_id: str) -> None:
    """Tag ``new_nodes`` with the origins of the ``matched`` nodes they replace; when the rule
    left no node behind but an Identity (which the pipeline's identity elimination removes
    next), list those origins as removed by ``rule_id``."""
    matched = list(matched)[::-1]  # onnxscript lists the match from its root (output) back
    origins = list(dict.fromkeys(name for node in matched for name in ir_origins(node)))
    chain = list(dict.fromkeys(
        rule for node in matched for rule in json.loads(node.metadata_props.get(RULES_TAG, "[]"))))
    chain.append(rule_id)
    new_nodes = list(new_nodes)
    for node in new_nodes:
        node.metadata_props[ORIGIN_TAG] = json.dumps(origins)
        node.metadata_props[RULES_TAG] = json.dumps(list(dict.fromkeys(chain)))
    if all(node.op_type == "Identity" for node in new_nodes):
        removed = json.loads(model.metadata_props.get(REMOVED_KEY, "{}"))
        removed.update(dict.fromkeys(origins, rule_id))
        model.metadata_props[REMOVED_KEY] = json.dumps(removed, sort_keys=True)


def origins(node: onnx.NodeProto) -> list[str]:
    """The original nodes a node of a saved model stands for (itself when no rule made it)."""
    props = {prop.key: prop.value for prop in node.metadata_props}
    if ORIGIN_TAG in props:
        return json.loads(props[ORIGIN_TAG])
    return [node_key(node.name, node.op_type, node.output[0] if node.output else "")]


def rules(node: onnx.NodeProto) -> list[str]:
    """The rule ids that built a node of a saved model, in the order they fired."""
    props = {prop.key: prop.value for prop in node.metadata_props}
    return json.loads(props.get(RULES_TAG, "[]"))


def removed(model: onnx.ModelProto) -> Mapping[str, str]:
    """Original node name -> the rule that removed it, for a saved model."""
    props = {prop.key: prop.value for prop in model.metadata_props}
    return json.loads(props.get(REMOVED_KEY, "{}"))
