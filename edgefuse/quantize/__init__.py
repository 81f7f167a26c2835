"""quantize: FP32 ONNX -> FP16 ONNX that stays within a cosine gate of the FP32 model on the host
with FP16 storage emulated, plus the report the compile stage needs to do the same on the board.

Order of work (precision first): fold and simplify in FP32 (the optimize pipeline, so a BatchNorm
whose variance does not fit FP16 is folded away before anything is rounded), then decide which
nodes stay FP32 (the documented policy, the user's list, activations that overflow FP16 on the
calibration inputs, and with ``keep_fp32="auto"`` a search), then convert, then measure.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import time
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from edgefuse._checks import integer_at_least, number_in
from edgefuse._files import (
    check_distinct_outputs,
    check_outputs_spare_inputs,
    save_onnx,
    write_text,
)
from edgefuse.acl.compile.precision import plan_keep_fp32
from edgefuse.convert.onnx_load import check_output_shapes, load_model
from edgefuse.errors import InputError, Ref
from edgefuse.optimize import OPTIMIZED_KEY, OptimizeResult, optimize
from edgefuse.preprocess import Preprocess
from edgefuse.quantize.constants import fp16_misfit
from edgefuse.quantize.fp16 import check_float32_model, convert_fp16
from edgefuse.quantize.mixed import rank_candidates, search_keep_set
from edgefuse.quantize.policy import Decision, policy_decisions
from edgefuse.quantize.report import FoldedConstant, QuantizeReport, atc_artifacts
from edgefuse.reference.compare import (
    Gate,
    OutputAgreement,
    compare_outputs,
    degenerate_outputs,
)
from edgefuse.reference.feeds import (
    FeedSet,
    FeedSource,
    calibration_preprocess,
    feed_set,
    input_specs,
)
from edgefuse.reference.fp16 import FP16_MAX, run_fp16_storage
from edgefuse.reference.onnx_runner import run_onnx, with_outputs
from edgefuse.verify.layers import compare_layers

DEFAULT_MIN_COSINE = 0.999
DEFAULT_SAMPLES = 2
# An activation whose calibration maximum passes FP16_MAX / HEADROOM stays FP32: inputs other than
# the calibration set reach further.
OVERFLOW_HEADROOM = 2.0

__all__ = ["DEFAULT_MIN_COSINE", "QuantizeResult", "quantize"]


@dataclasses.dataclass
class QuantizeResult:
    model: onnx.ModelProto
    report: QuantizeReport

    @property
    def passed(self) -> bool:
        return self.report.passed


def quantize(
    model: str | os.PathLike[str] | onnx.ModelProto,
    *,
    output: str | os.PathLike[str] | None = None,
    fp16: bool = True,
    keep_io_types: bool = False,
    keep_fp32: str | Sequence[str] = "auto",
    min_cosine: float = DEFAULT_MIN_COSINE,
    inputs: FeedSource | None = None,
    seed: int = 0,
    samples: int = DEFAULT_SAMPLES,
    report_path: str | os.PathLike[str] | None = None,
    max_evaluations: int = 40,
    budget_s: float = 600.0,
    preprocess: Preprocess | str | os.PathLike[str] | None = None,
) -> QuantizeResult:
    """Convert an FP32 model to FP16 so that, with FP16 storage emulated, every output keeps
    cosine >= ``min_cosine`` against the FP32 model on the calibration inputs.

    ``keep_fp32``: "auto" (policy + overflow + search), "none" (policy only), or node names and
    ONNX op types (a list, or one comma-separated string; "auto" may be one of the items).
    ``inputs``: calibration samples (an .npz, a folder of .npz, a folder of images or a video
    through ``preprocess`` — default: the model's own record —, mappings); default ``samples``
    seeded random draws. Outputs nearly constant on the calibration samples are left out of the
    gate and named in the report (a detector's map on noise measures nothing).
    The result is written even when the gate fails (``passed`` is False, the
    CLI exits 1): the report says the best cosine reached.
    """
    start = time.perf_counter()
    if not fp16:
        raise InputError("quantize() makes FP16 models only: INT8 on the board is quantized "
                         "inside ATC, from a calibration folder",
                         hint="pass fp16=True (--fp16); for INT8 write the calibration folder "
                              "with edgefuse.quantize.int8.write_int8_calibration (quantize "
                              "--int8) and compile with it (compile --int8)",
                         reference=Ref.UNSUPPORTED_PRECISION)
    if not isinstance(max_evaluations, int) or not isinstance(budget_s, (int, float)) or \
            max_evaluations < 1 or not budget_s > 0:
        raise InputError("the search needs at least one evaluation and a positive time budget",
                         context=f"max_evaluations={max_evaluations!r}, budget={budget_s!r}",
                         reference=Ref.BAD_SEARCH_BUDGET)
    samples = integer_at_least("samples", samples, 1)
    seed = integer_at_least("seed", seed, 0)
    min_cosine = number_in("min_cosine", min_cosine, -1.0, 1.0)
    check_distinct_outputs(model=output, report=report_path)
    check_outputs_spare_inputs({"model": output, "report": report_path},
                               {"input model": model, "calibration inputs": inputs})
    items = _keep_items(keep_fp32)
    original = load_model(model)
    check_output_shapes(original, where=f"'{model}'" if isinstance(model, (str, os.PathLike))
                       else "the model")
    fp32 = ir.serde.deserialize_model(original)  # the one proto -> IR conversion
    check_float32_model(fp32)
    _check_finite_constants(original)
    feeds = feed_set(input_specs(original), inputs, seed=seed, samples=samples,
                     preprocess=calibration_preprocess(original, preprocess))
    misfits = _misfit_constants(original)
    optimized = None if OPTIMIZED_KEY in fp32.metadata_props else optimize(fp32)
    if optimized is not None:
        fp32 = optimized.model
    _name_nodes(fp32)
    fp32_proto = ir.serde.serialize_model(fp32)  # what ONNX Runtime runs
    references = [run_onnx(original, f) for f in feeds]
    degenerate = degenerate_outputs(references)

    user, op_types = _user_decisions(fp32, [i for i in items if i not in ("auto", "none")])
    decisions = {**policy_decisions(fp32), **user}
    auto = "auto" in items
    if auto:
        for name, decision in _overflow_decisions(fp32, fp32_proto, feeds).items():
            decisions.setdefault(name, decision)

    evaluated: dict[frozenset[str], tuple] = {}

    def evaluate(keep: set[str]) -> tuple[float, bool, list[OutputAgreement], onnx.ModelProto,
                                          object]:
        key = frozenset(keep)
        if key not in evaluated:
            candidate = fp32.clone()
            conversion = convert_fp16(candidate, keep, keep_io_types=keep_io_types)
            proto = ir.serde.serialize_model(candidate)
            outputs = [run_fp16_storage(proto, f, force_fp16=False) for f in feeds]
            gate = compare_outputs(references, outputs, Gate(min_cosine))
            judged = [g for g in gate if g.name not in degenerate]
            lowest = min((g.agreement.rank for g in judged), default=float("nan"))
            passed = bool(judged) and all(g.passed for g in judged)
            evaluated[key] = (lowest, passed, gate, proto, conversion)
        return evaluated[key]

    search = None
    keep = set(decisions)
    if auto:
        eligible = {n.name for n in fp32.graph} - keep
        search = search_keep_set(
            lambda: rank_candidates(
                _layer_rows(fp32, fp32_proto, keep, keep_io_types, feeds[0]), eligible
            ),
            keep, lambda k: evaluate(k)[:2],
            max_evaluations=max_evaluations, budget_s=budget_s,
        )
        decisions.update(search.kept)
        keep = set(decisions)
    _, _, gate, result, conversion = evaluate(keep)
    decisions.update(conversion.constant_decisions)
    onnx.checker.check_model(result, full_check=True)

    report = QuantizeReport(
        settings={
            "precision": "fp16",
            "keep_io_types": keep_io_types,
            "keep_fp32": items,
            "calibration": {
                "source": "random" if inputs is None else (
                    str(inputs) if isinstance(inputs, (str, os.PathLike)) else "in-memory"),
                "seed": seed if inputs is None else None,
                "samples": len(feeds),
            },
        },
        decisions=_in_graph_order(decisions, fp32),
        op_types=op_types,
        folded_constants=_folded(misfits, fp32, optimized),
        conversion={
            "fp16_nodes": conversion.fp16_nodes,
            "fp32_nodes": len(conversion.fp32_nodes),
            "casts_inserted": conversion.casts_inserted,
            "constants_converted": conversion.constants_converted,
        },
        gate=gate,
        min_cosine=min_cosine,
        optimize=_optimize_summary(optimized),
        search=search.to_json() if search is not None else None,
        notes=_output_notes(references, keep_io_types),
        degenerate=degenerate,
    )
    report.atc = atc_artifacts(plan_keep_fp32(result, report.keep))
    report.seconds = time.perf_counter() - start
    if output is not None:
        save_onnx(result, output)
    if report_path is not None:
        write_text(report_path, report.dumps())
    return QuantizeResult(result, report)


def _keep_items(keep_fp32: str | Sequence[str]) -> list[str]:
    if not isinstance(keep_fp32, str) and not (
            isinstance(keep_fp32, Sequence) and all(isinstance(i, str) for i in keep_fp32)):
        raise InputError(
            f"keep_fp32 must be 'auto', 'none', or node names / op types (a list of strings or "
            f"one comma-separated string), got {keep_fp32!r}",
            reference=Ref.BAD_KEEP_FP32,
        )
    items = keep_fp32.split(",") if isinstance(keep_fp32, str) else list(keep_fp32)
    items = [item.strip() for item in items if item.strip()]
    if "none" in items and len(items) > 1:
        raise InputError(
            "--keep-fp32 none cannot be combined with other entries",
            hint="use 'none', 'auto', or a list of node names / op types (optionally with auto)",
            reference=Ref.BAD_KEEP_FP32,
        )
    return items or ["none"]


def _name_nodes(model: ir.Model) -> None:
    """Give unnamed nodes unique names: keep_dtype and the report refer to nodes by name."""
    taken = {node.name for node in model.graph if node.name}
    for index, node in enumerate(model.graph):
        if node.name:
            continue
        name = f"{node.op_type}_{index}"
        while name in taken:
            name += "_"
        node.name = name
        taken.add(name)


def _user_decisions(model: ir.Model, items: list[str]) -> tuple[dict[str, Decision], list[str]]:
    by_name = {node.name: node for node in model.graph}
    op_types_present = {node.op_type for node in model.graph}
    decisions: dict[str, Decision] = {}
    op_types: list[str] = []
    for item in items:
        if item in by_name:
            node = by_name[item]
            decisions[item] = Decision(item, node.op_type, "user", "named in --keep-fp32")
        elif item in op_types_present:
            op_types.append(item)
            for node in model.graph:
                if node.op_type == item:
                    decisions[node.name] = Decision(
                        node.name, item, "user", f"op type {item} named in --keep-fp32"
                    )
        else:
            close = difflib.get_close_matches(item, [*by_name, *op_types_present], n=3)
            raise InputError(
                f"--keep-fp32: '{item}' is neither a node name nor an op type of the model "
                "(after optimize)",
                hint=(f"did you mean {', '.join(close)}? " if close else "")
                + "a node folded away by optimize no longer exists; name its replacement",
                reference=Ref.UNKNOWN_KEEP_FP32_ENTRY,
            )
    return decisions, op_types


def _misfit_constants(model: onnx.ModelProto) -> dict[str, tuple[str, str, list[str]]]:
    """Float constants of the input model that do not fit FP16, with the nodes that read them."""
    readers = _readers(model)
    found = {}
    for name, values in _float32_constants(model):
        problem = fp16_misfit(values)
        if problem is not None:
            found[name] = (*problem, readers.get(name, []))
    return found


def _check_finite_constants(model: onnx.ModelProto) -> None:
    """Refuse weights holding NaN or Inf before anything is written: no FP16 model of them can
    pass the gate, and the FP32 model they come from is already broken."""
    readers = _readers(model)
    broken = []
    for name, values in _float32_constants(model):
        bad = int(values.size - np.count_nonzero(np.isfinite(values)))
        if bad:
            read_by = ", ".join(readers.get(name, [])[:2]) or "no node"
            broken.append(f"'{name}': {bad} of {values.size} value(s) NaN or Inf (read by "
                          f"{read_by})")
    if broken:
        raise InputError(
            f"{len(broken)} weight tensor(s) of the model hold NaN or Inf",
            context="\n".join(broken[:8]),
            hint="fix the FP32 model first (a diverged training run, a bad export or a corrupted "
                 "file); `edgefuse verify MODEL MODEL --per-layer` shows where NaN appears",
            reference=Ref.NON_FINITE_WEIGHTS)


def _readers(model: onnx.ModelProto) -> dict[str, list[str]]:
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(f"{node.op_type} '{node.name}'")
    return readers


def _float32_constants(model: onnx.ModelProto) -> Iterator[tuple[str, np.ndarray]]:
    """(name, values) of every float32 initializer and Constant of the main graph."""
    tensors = [(init.name, init) for init in model.graph.initializer]
    tensors += [(node.output[0], attribute.t) for node in model.graph.node
                if node.op_type == "Constant" for attribute in node.attribute
                if attribute.name == "value"]
    for name, tensor in tensors:
        if tensor.data_type == onnx.TensorProto.FLOAT:
            yield name, onnx.numpy_helper.to_array(tensor)


def _optimize_summary(optimized: OptimizeResult | None) -> dict:
    if optimized is None:
        return {"ran": False, "reason": f"the model carries the '{OPTIMIZED_KEY}' stamp: it was "
                                        "optimized already"}
    report = optimized.report
    return {
        "ran": True,
        "nodes_before": report.nodes_before,
        "nodes_after": report.nodes_after,
        "rules_applied": {rule_id: stats.applied
                          for rule_id, stats in report.rules.items() if stats.applied},
    }


def _folded(misfits, fp32: ir.Model, optimized: OptimizeResult | None) -> list[FoldedConstant]:
    remaining = set(fp32.graph.initializers)
    applied = list(_optimize_summary(optimized).get("rules_applied", {}))
    folded = []
    for name, (cause, detail, readers) in misfits.items():
        if name in remaining:
            continue  # still there: the conversion keeps its reader FP32 and reports it
        fate = "folded away by optimize in FP32" + (
            f" (rules applied: {', '.join(applied)})" if applied else ""
        )
        folded.append(FoldedConstant(name, readers, cause, detail, fate))
    return folded


def _overflow_decisions(model: ir.Model, proto: onnx.ModelProto, feeds: FeedSet):
    """Nodes producing or reading an activation that passes FP16_MAX / HEADROOM on calibration."""
    names = [v.name for node in model.graph for v in node.outputs if v.dtype == ir.DataType.FLOAT]
    peaks: dict[str, float] = {}
    exposed = with_outputs(proto, names)
    for feeds_one in feeds:
        for name, array in run_onnx(exposed, feeds_one).items():
            if name in names and array.size and np.issubdtype(array.dtype, np.floating):
                peak = float(np.max(np.abs(array)))
                peaks[name] = max(peaks.get(name, 0.0), peak)
    limit = FP16_MAX / OVERFLOW_HEADROOM
    values = {v.name: v for node in model.graph for v in node.outputs}
    decisions: dict[str, Decision] = {}
    for name, peak in peaks.items():
        if not peak > limit:
            continue
        value = values[name]
        detail = f"'{name}' reaches |x| = {peak:.4g} on the calibration inputs (limit {limit:g})"
        producer = value.producer()
        decisions.setdefault(producer.name, Decision(
            producer.name, producer.op_type, "activation-overflow", f"writes {detail}"))
        for consumer, _ in value.uses():
            decisions.setdefault(consumer.name, Decision(
                consumer.name, consumer.op_type, "activation-overflow", f"reads {detail}"))
    return decisions


def _output_notes(references, keep_io_types: bool) -> list[str]:
    if keep_io_types:
        return []
    notes = []
    for name in references[0]:
        peak = max(float(np.max(np.abs(r[name]))) if r[name].size else 0.0 for r in references)
        if np.issubdtype(references[0][name].dtype, np.floating) and peak > FP16_MAX:
            notes.append(
                f"output '{name}' reaches |x| = {peak:.4g}, beyond FP16's {FP16_MAX:g}: with FP16 "
                "outputs no keep-FP32 set can pass; keep FP32 inputs/outputs (--keep-io-types)"
            )
    return notes


def _layer_rows(fp32: ir.Model, fp32_proto, keep: set[str], keep_io_types: bool, feeds_one):
    candidate = fp32.clone()
    convert_fp16(candidate, keep, keep_io_types=keep_io_types)
    return compare_layers(fp32_proto, ir.serde.serialize_model(candidate), feeds_one).rows


def _in_graph_order(decisions: dict[str, Decision], model: ir.Model) -> dict[str, Decision]:
    order = {node.name: index for index, node in enumerate(model.graph)}
    return dict(sorted(decisions.items(), key=lambda item: order.get(item[0], len(order))))
