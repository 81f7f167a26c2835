"""optimize: pattern-based fusions over onnx-ir with a report of what fired and why not.

The optimized model carries a stamp (metadata ``edgefuse.optimize`` = the target), so that a later
stage handed an optimized model (quantize folds in FP32 before it rounds) does not run the whole
pipeline again.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Sequence

import onnx
import onnx_ir as ir

from edgefuse._files import (
    check_distinct_outputs,
    check_outputs_spare_inputs,
    save_onnx,
    write_text,
)
from edgefuse.acl.ops.spec import DOMAIN
from edgefuse.convert.onnx_load import check_output_shapes, load_model
from edgefuse.optimize.append_yolo_head import YoloHeadOptions, append_yolo_head
from edgefuse.optimize.pipeline import pipeline_for, run_pipeline, select_rules
from edgefuse.optimize.report import RewriteReport

# The metadata key that marks a model as optimized; its value is the target.
OPTIMIZED_KEY = "edgefuse.optimize"


@dataclasses.dataclass
class OptimizeResult:
    model: onnx.ModelProto | ir.Model  # the type the caller passed (a path gives a ModelProto)
    report: RewriteReport


def optimize(
    model: str | os.PathLike[str] | onnx.ModelProto | ir.Model,
    *,
    output: str | os.PathLike[str] | None = None,
    target: str = "cpu",
    only: Sequence[str] | None = None,
    skip: Sequence[str] | None = None,
    report_path: str | os.PathLike[str] | None = None,
    yolo_head: YoloHeadOptions | None = None,
) -> OptimizeResult:
    """Fold and fuse ``model`` for ``target`` and say, per rule, what fired and why not.

    ``yolo_head`` (opt-in) then appends the device-side YOLO decode + NMS op, so the model
    returns final detections (``append_yolo_head``; the CLI's ``--yolo-head``).

    The input is never modified; the result is checked with the ONNX checker before it is
    returned or written, so a rule bug surfaces here and not on the board. Like onnxscript's
    ``rewrite()``, an ``ir.Model`` in gives an ``ir.Model`` out, so a caller working in IR does
    not convert back and forth.
    """
    pipeline = pipeline_for(target)
    rules = select_rules(pipeline.rules, only, skip)
    check_distinct_outputs(model=output, report=report_path)
    check_outputs_spare_inputs({"model": output, "report": report_path}, {"input model": model})
    in_ir = isinstance(model, ir.Model)
    if in_ir:
        ir_model = model.clone()
    else:
        proto = load_model(model, copy=False)
        check_output_shapes(proto, where=_describe(model))
        ir_model = ir.serde.deserialize_model(proto)
    _initializers_out_of_inputs(ir_model)
    foreign = _foreign_ops(ir_model)
    report = run_pipeline(ir_model, pipeline, rules)
    if foreign:
        report.notes.append(
            f"{sum(foreign.values())} node(s) of custom domains passed through unchanged "
            f"({', '.join(f'{op} x{n}' for op, n in sorted(foreign.items()))}): no rule rewrites "
            "them or folds across them, and verify runs them only if they carry an ONNX function"
        )
    ir_model.metadata_props[OPTIMIZED_KEY] = pipeline.target
    result = ir.serde.serialize_model(ir_model)
    if yolo_head is not None:
        result = append_yolo_head(result, yolo_head)
        report.notes.append(_yolo_head_note(yolo_head))
        if in_ir:
            ir_model = ir.serde.deserialize_model(result)
    _check(result)
    if output is not None:
        save_onnx(result, output)
    if report_path is not None:
        write_text(report_path, report.dumps())
    return OptimizeResult(ir_model if in_ir else result, report)


def _yolo_head_note(options: YoloHeadOptions) -> str:
    per_class = f", max_per_class={options.max_per_class}" if options.max_per_class else ""
    return (
        f"appended edgefuse::YoloHead (conf={options.score_threshold:g}, "
        f"iou={options.iou_threshold:g}, max_det={options.max_detections}{per_class}"
        f"{', multi_label' if options.multi_label else ''}): the model returns boxes, scores, "
        "classes, num_detections (postprocess layout yolo_head)"
    )


def _foreign_ops(model: ir.Model) -> Counter:
    """Ops of domains edgefuse has no rules or schemas for (edgefuse's own ops excluded)."""
    return Counter(
        f"{node.domain}::{node.op_type}"
        for node in ir.traversal.RecursiveGraphIterator(model.graph)
        if node.domain not in ("", "ai.onnx", "ai.onnx.ml", DOMAIN)
    )


def _initializers_out_of_inputs(model: ir.Model) -> None:
    """Spell an IR < 4 model's constants the IR 4 way, so that rules may fold them.

    Before IR 4 every initializer had to be listed as a graph input too, and ONNX Runtime treats
    such inputs as constants; from IR 4 on an initializer listed as an input is a default the
    caller may override, which the rules refuse to fold. Dropping those inputs and raising the IR
    version keeps the meaning and lets the folded model carry initializers that are not inputs.
    """
    if model.ir_version >= 4:
        return
    inputs = model.graph.inputs
    for value in [v for v in inputs if v.name in model.graph.initializers]:
        inputs.remove(value)
    model.ir_version = 4


def _describe(model: object) -> str:
    return f"'{model}'" if isinstance(model, (str, os.PathLike)) else "the model"


def _check(model: onnx.ModelProto) -> None:
    """A model the checker rejects after optimizing is an edgefuse bug, not a user error."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise RuntimeError(f"optimize produced a model the ONNX checker rejects: {exc}") from exc
