"""Per-layer comparison: every intermediate tensor the reference and the candidate share, both
accumulated and isolated, so that the first layer that breaks is obvious.

Why both views (rknn-toolkit2's accuracy_analysis "entire"/"single", msit compare's ``-single``):
the *accumulated* error (the candidate fed its own upstream results) is what the outputs see, but
it grows along the graph and hides where it started; the *isolated* error (each candidate layer fed
the reference's inputs, rounded to FP16 where the candidate stores them in FP16, since that is what
an FP16 layer reads) is that layer's own contribution. A layer whose isolated error is large is
a culprit; one whose accumulated error is large but isolated small is a victim.

Tensors are matched by name: edgefuse's optimizer and FP16 converter keep the names of the values
they keep (a Conv that absorbed a BatchNorm writes the BatchNorm's output name), and the FP16
emulation keeps names too. A candidate input that the reference lacks is traced back through
Casts (what the FP16 converter inserts); if that fails, the layer is fed the candidate's own value
and its row says ``partial``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

import numpy as np
import onnx

from edgefuse._deps import require
from edgefuse._files import atomic_output, write_text
from edgefuse.reference.compare import Agreement
from edgefuse.reference.fp16 import (
    FP16_MAX,
    coerce_feeds,
    fp16_storage_model,
    has_fp16,
    tensor_types,
)
from edgefuse.reference.onnx_runner import run_onnx, with_outputs

FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
# msit's per-operator alarm (MONITOR_THRESHOLD cosine >= 0.99): a layer below it is flagged.
DEFAULT_LAYER_ALARM = 0.99
DEFAULT_WORST = 5
_WORST_FACTOR = 2.0  # a "worst" layer's error is at least this multiple of the median layer's
_MAX_CHAIN = 3  # how far upstream an isolated layer may recompute inputs the reference lacks


@dataclasses.dataclass
class LayerRow:
    index: int
    tensor: str
    node: str
    op_type: str
    shape: tuple[int, ...]
    reference_max_abs: float
    accumulated: Agreement
    isolated: Agreement | None
    partial: bool = False  # isolated run fed some candidate values (no reference counterpart)
    flags: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["shape"] = list(self.shape)
        return data


@dataclasses.dataclass
class LayerReport:
    rows: list[LayerRow]
    alarm_cosine: float
    emulated_fp16: bool

    @property
    def first_break(self) -> LayerRow | None:
        """The first layer in graph order whose accumulated cosine is below the alarm."""
        return next((r for r in self.rows if not r.accumulated.cosine >= self.alarm_cosine),
                    None)

    def worst(self) -> list[LayerRow]:
        return [r for r in self.rows if "worst" in r.flags]

    def to_json(self) -> dict:
        first = self.first_break
        return {
            "alarm_cosine": self.alarm_cosine,
            "emulated_fp16": self.emulated_fp16,
            "first_break": first.tensor if first else None,
            "worst": [r.tensor for r in self.worst()],
            "layers": [r.to_json() for r in self.rows],
        }

    def render(self, *, width: int = 36) -> str:
        header = (f"{'#':>4}  {'tensor':<{width}}  {'op':<16}  {'acc cos':>10}  {'acc relL2':>9}  "
                  f"{'acc maxabs':>10}  {'iso cos':>10}  {'iso relL2':>9}  flags")
        lines = [header]
        for row in self.rows:
            iso = row.isolated
            iso_text = (f"{iso.cosine:>10.6f}  {iso.rel_l2_error:>9.2e}" if iso is not None
                        else f"{'-':>10}  {'-':>9}")
            lines.append(
                f"{row.index:>4}  {_clip(row.tensor, width):<{width}}  {row.op_type[:16]:<16}  "
                f"{row.accumulated.cosine:>10.6f}  {row.accumulated.rel_l2_error:>9.2e}  "
                f"{row.accumulated.max_abs_error:>10.3g}  {iso_text}  {','.join(row.flags)}"
            )
        first = self.first_break
        mode = "FP16 storage emulated" if self.emulated_fp16 else "as written"
        lines.append(
            f"{len(self.rows)} layers compared ({mode}); alarm below cosine {self.alarm_cosine}; "
            + (f"first break: {first.tensor} ({first.op_type} '{first.node}')" if first
               else "no layer breaks")
        )
        return "\n".join(lines)

    def write_json(self, path: str | os.PathLike[str]) -> None:
        write_text(path, json.dumps(self.to_json(), indent=2))

    def plot(self, path: str | os.PathLike[str]) -> None:
        """PNG of 1 - cosine per layer (accumulated and isolated), worst layers labelled."""
        matplotlib = require("matplotlib", extra="plot", purpose="the per-layer plot")
        matplotlib.use("Agg")
        pyplot = require("matplotlib.pyplot", extra="plot", purpose="the per-layer plot")
        floor = 1e-12
        x = [r.index for r in self.rows]
        acc = [max(1.0 - _finite(r.accumulated.cosine), floor) for r in self.rows]
        iso = [max(1.0 - _finite(r.isolated.cosine), floor) if r.isolated else np.nan
               for r in self.rows]
        figure, axes = pyplot.subplots(figsize=(max(8.0, len(x) * 0.08), 4.5))
        axes.semilogy(x, acc, label="accumulated", linewidth=1.2)
        axes.semilogy(x, iso, label="isolated", linewidth=0.8, alpha=0.8)
        axes.axhline(1.0 - self.alarm_cosine, color="red", linestyle="--", linewidth=0.8,
                     label=f"alarm (cosine {self.alarm_cosine})")
        for row in self.worst():
            y = max(1.0 - _finite(row.isolated.cosine if row.isolated else row.accumulated.cosine),
                    floor)
            axes.plot([row.index], [y], "rv")
            axes.annotate(_clip(row.tensor, 28), (row.index, y), fontsize=7, rotation=30)
        axes.set_xlabel("layer (graph order)")
        axes.set_ylabel("1 - cosine")
        axes.legend(loc="upper left", fontsize=8)
        figure.tight_layout()
        with atomic_output(path, suffix=".png") as tmp:
            figure.savefig(tmp, format="png", dpi=120)
        pyplot.close(figure)


def compare_layers(
    reference: onnx.ModelProto,
    candidate: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    emulate_fp16: bool | None = None,
    isolated: bool = True,
    alarm_cosine: float = DEFAULT_LAYER_ALARM,
    worst: int = DEFAULT_WORST,
    candidate_types: Mapping[str, int] | None = None,
) -> LayerReport:
    """Compare every float tensor both models compute, in the candidate's graph order.

    ``emulate_fp16``: None runs a candidate with FP16 tensors with FP16 storage emulated and an
    FP32 candidate as written; True emulates FP16 storage of every float tensor of an FP32
    candidate too (ATC's default force_fp16); False runs it as written on ONNX Runtime.
    ``candidate_types``: ``tensor_types(candidate)`` when the caller has it (shape inference is
    the slow part on a large model).
    """
    cand_types = tensor_types(candidate) if candidate_types is None else candidate_types
    declared = has_fp16(candidate, cand_types)
    emulate = declared if emulate_fp16 is None else emulate_fp16
    force = None if not emulate else not declared  # declared FP16 tensors only, or all
    ref_types = tensor_types(reference)
    ref_graph_inputs = {v.name for v in reference.graph.input}
    producers = _producers(candidate)
    matched = [
        (index, name, node)
        for index, node in enumerate(candidate.graph.node)
        for name in node.output
        if name and ref_types.get(name) in FLOAT_TYPES and cand_types.get(name) in FLOAT_TYPES
        and name not in ref_graph_inputs
    ]
    names = [name for _, name, _ in matched]
    ref_values = run_onnx(with_outputs(reference, names), feeds)
    runnable = (fp16_storage_model(candidate, force_fp16=force, types=cand_types)
                if emulate else candidate)
    iso_plan = _IsolatedPlan(candidate, ref_values, feeds, cand_types, producers, names)
    cand_values = run_onnx(
        with_outputs(runnable, names + sorted(iso_plan.needs_candidate)),
        coerce_feeds(runnable, feeds),
    )
    iso_values: dict[str, np.ndarray] = {}
    if isolated and names:
        iso_values = iso_plan.run(cand_values, emulate, force)
    rows = []
    for position, (_, name, node) in enumerate(matched):
        ref, cand = ref_values[name], cand_values[name]
        if ref.shape != cand.shape:
            continue
        iso = iso_values.get(name)
        node = _origin(node, producers, ref_types)
        row = LayerRow(
            index=position,
            tensor=name,
            node=node.name,
            op_type=node.op_type,
            shape=tuple(ref.shape),
            reference_max_abs=float(np.max(np.abs(ref))) if ref.size else 0.0,
            accumulated=Agreement.between(ref, cand),
            isolated=Agreement.between(ref, iso) if iso is not None else None,
            partial=name in iso_plan.partial,
        )
        rows.append(row)
    _flag(rows, alarm_cosine, worst)
    return LayerReport(rows, alarm_cosine, emulate)


def _flag(rows: list[LayerRow], alarm: float, worst: int) -> None:
    for row in rows:
        if row.reference_max_abs > FP16_MAX:
            row.flags.append("exceeds-fp16")
        if not np.isfinite(row.accumulated.max_abs_error) or (
            row.isolated is not None and not np.isfinite(row.isolated.max_abs_error)
        ):
            row.flags.append("non-finite")
        if row.isolated is not None and not row.isolated.cosine >= alarm:  # NaN breaks too
            row.flags.append("breaks")
        if row.partial:
            row.flags.append("partial")

    def badness(row: LayerRow) -> float:
        metrics = row.isolated or row.accumulated
        return np.inf if not np.isfinite(metrics.rel_l2_error) else metrics.rel_l2_error

    # Plain FP16 rounding gives every layer a similar error; "worst" marks layers clearly above it.
    finite = [badness(r) for r in rows if np.isfinite(badness(r))]
    typical = float(np.median(finite)) if finite else 0.0
    ranked = sorted(rows, key=badness, reverse=True)[:worst]
    for row in ranked:
        if badness(row) > _WORST_FACTOR * typical:
            row.flags.insert(0, "worst")


class _IsolatedPlan:
    """A model of independent copies of the candidate's layers, each fed reference inputs."""

    def __init__(self, candidate, ref_values, feeds, cand_types, producers, names) -> None:
        self.candidate = candidate
        self.available = {**{k: np.asarray(v) for k, v in feeds.items()}, **ref_values}
        self.cand_types = cand_types
        self.producers = producers
        self.targets = set(names)
        self.initializers = {init.name for init in candidate.graph.initializer}
        self.partial: set[str] = set()
        self.needs_candidate: set[str] = set()
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: dict[str, tuple[str, str]] = {}  # iso input -> (source, 'ref' | 'cand')
        self.copied: set[str] = set()
        self.produced: set[str] = set()
        for node in candidate.graph.node:
            if any(o in self.targets for o in node.output) and node.name not in self.copied:
                self._add(node)

    def _add(self, node: onnx.NodeProto, depth: int = 0) -> bool:
        """Copy ``node`` reading reference values; True if some input had to be the candidate's.

        An input the reference lacks that a node computes from reference values (the FP16 output
        an inserted Cast widens back) is computed by a copy of that node too, a few levels deep.
        """
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        partial = False
        for position, name in enumerate(node.input):
            if not name or name in self.initializers:
                continue
            source = self._reference_source(name)
            if source is not None:
                copy.input[position] = self._input(source, name, "ref")
                continue
            producer = self.producers.get(name)
            if producer is not None and depth < _MAX_CHAIN and producer.name not in self.copied:
                partial |= self._add(producer, depth + 1)
                copy.input[position] = f"iso::{name}"
                continue
            if f"iso::{name}" in self.produced:
                copy.input[position] = f"iso::{name}"
                continue
            partial = True
            self.needs_candidate.add(name)
            copy.input[position] = self._input(name, name, "cand")
        copy.output[:] = [f"iso::{o}" if o else "" for o in node.output]
        copy.name = f"iso::{node.name}"
        self.copied.add(node.name)
        self.produced.update(o for o in copy.output if o)
        if partial:
            self.partial.update(o for o in node.output if o in self.targets)
        self.nodes.append(copy)
        return partial

    def _input(self, source: str, original: str, kind: str) -> str:
        iso_name = f"iso::{kind}::{original}"
        self.inputs[iso_name] = (source, kind)
        return iso_name

    def _reference_source(self, name: str) -> str | None:
        """``name`` itself if the reference has it, else what a chain of Casts converted."""
        seen = 0
        while name not in self.available:
            producer = self.producers.get(name)
            if producer is None or producer.op_type != "Cast" or seen > 8:
                return None
            name, seen = producer.input[0], seen + 1
        return name

    def run(
        self, cand_values: Mapping[str, np.ndarray], emulate: bool, force: bool | None
    ) -> dict[str, np.ndarray]:
        graph = self.candidate.graph
        inputs, feeds = [], {}
        for iso_name, (source, kind) in self.inputs.items():
            value = self.available[source] if kind == "ref" else cand_values[source]
            original = iso_name.split("::", 2)[2]
            elem = self.cand_types.get(original, onnx.TensorProto.FLOAT)
            dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
            with np.errstate(over="ignore"):  # an FP16 overflow is what the comparison shows
                feeds[iso_name] = np.asarray(value).astype(dtype)
            inputs.append(onnx.helper.make_tensor_value_info(iso_name, elem, value.shape))
        outputs = [onnx.ValueInfoProto(name=f"iso::{t}") for t in sorted(self.targets)]
        iso_graph = onnx.helper.make_graph(
            self.nodes, "isolated", inputs, outputs, list(graph.initializer)
        )
        model = onnx.helper.make_model(
            iso_graph, opset_imports=list(self.candidate.opset_import),
            ir_version=self.candidate.ir_version,
        )
        model.functions.extend(self.candidate.functions)
        runnable = fp16_storage_model(model, force_fp16=force) if emulate else model
        results = run_onnx(runnable, coerce_feeds(runnable, feeds))
        return {name.removeprefix("iso::"): value for name, value in results.items()}


def _origin(node: onnx.NodeProto, producers, ref_types) -> onnx.NodeProto:
    """The node a row is about: past the Casts a conversion added after it (FP16 -> FP32)."""
    for _ in range(_MAX_CHAIN):
        if node.op_type != "Cast" or node.input[0] in ref_types:
            break
        upstream = producers.get(node.input[0])
        if upstream is None:
            break
        node = upstream
    return node


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: node for node in model.graph.node for o in node.output if o}


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _finite(value: float) -> float:
    return value if np.isfinite(value) else -1.0
