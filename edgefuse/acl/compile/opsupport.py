"""Will ATC's ONNX parser take this model? A per-node answer on the host, before ATC runs.

Why on the host: ATC needs a CANN install, takes minutes, and stops at the first class of error;
the table in ``data/onnx_op_support.yaml`` (with its sources) answers in milliseconds for every
node at once, so ``compile`` can refuse with the full list and ``inspect`` can be run anywhere.

How a node is judged, mirroring the parser (Ascend/parser@parser/onnx/onnx_parser.cc): its key is
``<domain>::<opset of that domain in opset_import>::<OpType>``; a default-domain key must be in
the table's opset range for the op (or claimed by a registered plugin), a custom-domain key must be
claimed by a registered plugin, and default-domain nodes require a single ``opset_import`` entry.
Known per-op restrictions (NonMaxSuppression's constant thresholds, ...) are predicates below,
keyed by the restriction ids of the YAML; their texts and sources live in the YAML.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import numpy as np
import onnx
import yaml

from edgefuse._graph_walk import all_nodes
from edgefuse.acl.compile.soc import validate_soc

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str  # a restriction or model-check id from the YAML
    severity: str  # "error" (ATC will fail) | "warning" (it compiles; know this)
    message: str
    hint: str
    source: str

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Restriction:
    id: str
    severity: str
    message: str
    hint: str
    source: str
    socs: frozenset[str] | None  # soc short names it applies to; None: every soc

    def finding(self) -> Finding:
        return Finding(self.id, self.severity, self.message, self.hint, self.source)


@dataclasses.dataclass(frozen=True)
class OpEntry:
    op_type: str
    opsets: frozenset[int] | None  # None: every opset (handled by the parser itself)
    ir_by_opset: Mapping[int, str] | str
    restrictions: tuple[str, ...]
    ascend_only: bool

    def ir_type(self, opset: int) -> str | None:
        if isinstance(self.ir_by_opset, str):
            return self.ir_by_opset
        return self.ir_by_opset.get(opset)

    def supports(self, opset: int) -> bool:
        return self.opsets is None or opset in self.opsets

    def opsets_text(self) -> str:
        return "any" if self.opsets is None else format_ranges(self.opsets)


@dataclasses.dataclass(frozen=True)
class OpSupportTable:
    ops: Mapping[str, OpEntry]
    restrictions: Mapping[str, Restriction]
    model_checks: Mapping[str, Mapping[str, str]]
    max_opset: int
    source: str

    def model_finding(self, check: str, severity: str = "error", detail: str = "") -> Finding:
        texts = self.model_checks[check]
        message = texts["message"] + (f": {detail}" if detail else "")
        return Finding(check, severity, message, texts["hint"], texts["source"])


@dataclasses.dataclass
class NodeSupport:
    name: str
    op_type: str
    domain: str
    opset: int
    ir_type: str | None
    findings: list[Finding]

    @property
    def supported(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op_type": self.op_type,
            "domain": self.domain,
            "opset": self.opset,
            "ir_type": self.ir_type,
            "supported": self.supported,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclasses.dataclass
class OpSupportReport:
    target: str | None
    opset: int
    nodes: list[NodeSupport]
    model_findings: list[tuple[str, Finding]]  # (subject: an input name or "model", finding)
    table_source: str

    @property
    def errors(self) -> list[tuple[str, Finding]]:
        """Every error as (subject, finding); the subject is a node, an input or "model"."""
        found = [(s, f) for s, f in self.model_findings if f.severity == "error"]
        for node in self.nodes:
            found += [(f"{node.name} ({node.op_type})", f) for f in node.findings
                      if f.severity == "error"]
        return found

    @property
    def ok(self) -> bool:
        return not self.errors

    def render(self, *, all_nodes: bool = True) -> str:
        """A per-node table, then model-level findings and a one-line verdict."""
        target = self.target or "any soc"
        lines = [f"ATC ONNX parser support for {target}, model opset {self.opset}"]
        shown = [n for n in self.nodes if all_nodes or n.findings]
        if shown:
            name_w = min(max(len(n.name) for n in shown), 40)
            op_w = max(len(n.op_type) for n in shown)
            for node in shown:
                status = "ok" if node.supported else "UNSUPPORTED"
                lines.append(f"  {node.name[:40]:<{name_w}}  {node.op_type:<{op_w}}  {status}")
                for finding in node.findings:
                    lines.append(f"      {finding.severity}[{finding.check}]: {finding.message}")
                    lines.append(f"        hint: {finding.hint}")
        for subject, finding in self.model_findings:
            lines.append(f"  {subject}: {finding.severity}[{finding.check}]: {finding.message}")
            lines.append(f"        hint: {finding.hint}")
        bad = sum(not n.supported for n in self.nodes)
        warnings = sum(f.severity == "warning" for n in self.nodes for f in n.findings)
        warnings += sum(f.severity == "warning" for _, f in self.model_findings)
        verdict = "supported" if self.ok else "NOT supported"
        lines.append(
            f"{verdict}: {bad} of {len(self.nodes)} nodes unsupported, "
            f"{len(self.errors)} errors, {warnings} warnings (table: {self.table_source})"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "opset": self.opset,
            "supported": self.ok,
            "table_source": self.table_source,
            "model_findings": [
                {"subject": subject, **finding.to_json()}
                for subject, finding in self.model_findings
            ],
            "nodes": [node.to_json() for node in self.nodes],
        }


# ---- the table ----------------------------------------------------------------------------------


def parse_ranges(text: str) -> frozenset[int]:
    """``"1,6,8-18"`` -> {1, 6, 8, ..., 18}."""
    values: set[int] = set()
    for part in str(text).split(","):
        low, _, high = part.strip().partition("-")
        values.update(range(int(low), int(high or low) + 1))
    return frozenset(values)


def format_ranges(values: Iterable[int]) -> str:
    """{1, 6, 8, 9, 10} -> ``"1,6,8-10"``."""
    ordered = sorted(values)
    parts: list[str] = []
    start = prev = ordered[0]
    for value in ordered[1:] + [None]:  # type: ignore[list-item]
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)


@functools.cache
def load_table() -> OpSupportTable:
    """The packaged table, parsed once."""
    text = importlib.resources.files("edgefuse.acl.compile").joinpath("data/onnx_op_support.yaml")
    data = yaml.safe_load(text.read_text(encoding="utf-8"))
    restrictions = {
        rid: Restriction(
            rid,
            spec["severity"],
            spec["message"],
            spec["hint"],
            spec["source"],
            frozenset(spec["socs"]) if "socs" in spec else None,
        )
        for rid, spec in data["restrictions"].items()
    }
    ops = {}
    for op_type, spec in data["ops"].items():
        ir = spec["ir"]
        ir_by_opset: Mapping[int, str] | str = ir if isinstance(ir, str) else {
            opset: name for ranges, name in ir.items() for opset in parse_ranges(ranges)
        }
        ops[op_type] = OpEntry(
            op_type,
            None if spec.get("parser_builtin") else parse_ranges(spec["opsets"]),
            ir_by_opset,
            tuple(spec.get("restrictions", ())),
            bool(spec.get("ascend_only", False)),
        )
    return OpSupportTable(
        ops, restrictions, data["model_checks"], data["max_opset"], data["source"]
    )


# ---- restriction predicates: True when the node violates the restriction --------------------


@dataclasses.dataclass(frozen=True)
class _Context:
    constants: Mapping[str, np.ndarray]  # initializers and Constant outputs, by value name


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def _nms_thresholds_not_constant(node: onnx.NodeProto, ctx: _Context) -> bool:
    return any(name and name not in ctx.constants for name in node.input[2:5])


def _nms_no_max_output(node: onnx.NodeProto, ctx: _Context) -> bool:
    return not _input(node, 2)


def _nms_defaults_used(node: onnx.NodeProto, ctx: _Context) -> bool:
    return bool(_input(node, 2)) and not (_input(node, 3) and _input(node, 4))


def _always(node: onnx.NodeProto, ctx: _Context) -> bool:
    return True


def _nms_max_output_above_700(node: onnx.NodeProto, ctx: _Context) -> bool:
    value = ctx.constants.get(_input(node, 2))
    return value is not None and value.size > 0 and int(np.max(value)) > 700


def _avgpool_kernel_above_255(node: onnx.NodeProto, ctx: _Context) -> bool:
    for attr in node.attribute:
        if attr.name == "kernel_shape":
            return any(k > 255 for k in attr.ints)
    return False


PREDICATES: dict[str, Callable[[onnx.NodeProto, _Context], bool]] = {
    "nms-constant-thresholds": _nms_thresholds_not_constant,
    "nms-needs-max-output": _nms_no_max_output,
    "nms-five-input-form": _nms_defaults_used,
    "nms-padded-output": _always,
    "nms-fp16-boxes": _always,
    "nms-max-output-700": _nms_max_output_above_700,
    "avgpool-kernel-255": _avgpool_kernel_above_255,
}


# ---- the check ----------------------------------------------------------------------------------


def opset_imports(model: onnx.ModelProto) -> dict[str, int]:
    """``{domain: version}`` with the default domain under ``""``."""
    return {
        ("" if entry.domain in DEFAULT_DOMAINS else entry.domain): entry.version
        for entry in model.opset_import
    }


def check_model(
    model: onnx.ModelProto,
    *,
    target: str | None = None,
    plugins: Collection[str] = (),
    gear_dims: Mapping[str, Collection[int]] | None = None,
) -> OpSupportReport:
    """Judge every node of ``model`` (subgraphs included) against the parser table.

    ``plugins`` are the ``OriginOpType`` strings of registered custom parser plugins
    (``"ai.onnx::11::MyOp"``, ``"my.domain::1::MyOp"``); ``gear_dims`` maps an input name to the
    dimension indices that ATC gears make dynamic (``{"x": {0}}`` for --dynamic_batch_size).
    """
    table = load_table()
    short_name = validate_soc(target).short_name if target else None
    imports = opset_imports(model)
    opset = imports.get("", 0)
    ctx = _Context(_constants(model.graph))
    nodes = [
        _check_node(node, imports, table, ctx, short_name, frozenset(plugins))
        for node in all_nodes(model.graph)
    ]
    model_findings: list[tuple[str, Finding]] = []
    if opset > table.max_opset:
        model_findings.append(("model", table.model_finding(
            "opset-beyond-parser", detail=f"opset {opset}, parser table up to {table.max_opset}"
        )))
    uses_default = any(n.domain in DEFAULT_DOMAINS for n in all_nodes(model.graph))
    if uses_default and len(imports) > 1:
        domains = ", ".join(repr(d) for d in imports)
        model_findings.append(("model", table.model_finding(
            "several-opset-imports", detail=f"opset_import has {domains}"
        )))
    for name, dims in _dynamic_dims(model.graph).items():
        uncovered = sorted(set(dims) - set((gear_dims or {}).get(name, ())))
        if uncovered:
            model_findings.append((f"input {name}", table.model_finding(
                "dynamic-input", detail=f"dimensions {uncovered}"
            )))
    return OpSupportReport(target, opset, nodes, model_findings, table.source)


def _check_node(
    node: onnx.NodeProto,
    imports: Mapping[str, int],
    table: OpSupportTable,
    ctx: _Context,
    short_name: str | None,
    plugins: frozenset[str],
) -> NodeSupport:
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    opset = imports.get(domain, 0)
    key = f"{domain or 'ai.onnx'}::{opset}::{node.op_type}"
    result = NodeSupport(node.name, node.op_type, domain, opset, None, [])
    if key in plugins:
        result.ir_type = "plugin"
        return result
    if domain:
        result.findings.append(table.model_finding("custom-domain", detail=key))
        return result
    entry = table.ops.get(node.op_type)
    if entry is None:
        result.findings.append(table.model_finding("unknown-op", detail=key))
        return result
    if not entry.supports(opset):
        result.findings.append(table.model_finding(
            "opset-out-of-range", detail=f"{key}; registered at opsets {entry.opsets_text()}"
        ))
        return result
    result.ir_type = entry.ir_type(opset)
    for rid in entry.restrictions:
        restriction = table.restrictions[rid]
        if restriction.socs is not None and short_name not in restriction.socs:
            continue
        if PREDICATES[rid](node, ctx):
            result.findings.append(restriction.finding())
    return result


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {init.name: onnx.numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    values[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
    return values


def _dynamic_dims(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Graph inputs (not initializers) with dimensions that are symbolic or unknown."""
    initializers = {init.name for init in graph.initializer}
    found = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        dynamic = [i for i, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value < 1]
        if dynamic or not value.type.tensor_type.HasField("shape"):
            found[value.name] = dynamic or [-1]
    return found
