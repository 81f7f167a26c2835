"""append-yolo-head: a YOLO model's raw output -> ``edgefuse::YoloHead`` -> final detections.

Before: one graph output ``predictions``, YOLOv5 ``[B, N, 5 + C]`` (rows of cx, cy, w, h,
objectness, C class scores) or YOLOv8 ``[B, 4 + C, N]`` (no objectness).
After: ``YoloHead(predictions)`` (with a ``Transpose`` in front for YOLOv5, whose layout is
box-major) and, instead of ``predictions``, four outputs: ``boxes [B, D, 4]`` x1 y1 x2 y2,
``scores [B, D]``, ``classes [B, D]`` int32 and ``num_detections [B]`` int32, D =
``max_detections`` (semantics in edgefuse/acl/ops/yolo_head/spec.py).

Why a graph transformation and not a rule: it changes what the model returns (the number, names,
shapes and meaning of its outputs), so no pipeline may run it by default; it is called
explicitly (opt-in) with the thresholds the application wants. The result carries the op's ONNX
function, so it runs on ONNX Runtime as well as, compiled by ATC, on the NPU.

Layout detection (``layout="auto"``): the axis with 5 + C (v5) or 4 + C (v8) entries is the
short one, N is in the thousands; when the shape cannot tell (both axes small, or C unknown),
the caller must name the layout.
"""

from __future__ import annotations

import dataclasses

import onnx
import onnx.helper
import onnx.shape_inference

from edgefuse.acl.ops.host import attach_functions
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.errors import InputError, Ref

LAYOUTS = ("auto", "yolov5", "yolov8")
OUTPUT_NAMES = ("boxes", "scores", "classes", "num_detections")


@dataclasses.dataclass(frozen=True)
class YoloHeadOptions:
    """How to decode and filter; defaults are Ultralytics' predict defaults."""

    layout: str = "auto"  # "auto" | "yolov5" | "yolov8"
    output: str | None = None  # the graph output to decode; None: the model's only 3-D output
    score_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 300
    max_per_class: int = 0  # 0: max_detections
    multi_label: bool = False
    keep_predictions: bool = False  # also keep the raw output (copies it off the device)


def append_yolo_head(
    model: onnx.ModelProto, options: YoloHeadOptions = YoloHeadOptions()
) -> onnx.ModelProto:
    """A copy of ``model`` that returns final detections instead of the raw YOLO output."""
    if options.layout not in LAYOUTS:
        raise InputError(
            f"unknown YOLO layout '{options.layout}'",
            hint=f"use one of: {', '.join(LAYOUTS)}",
            reference=Ref.BAD_YOLO_HEAD,
        )
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    output = _pick_output(onnx.shape_inference.infer_shapes(model), options.output)
    shape = _static_dims(output)
    layout = options.layout if options.layout != "auto" else _detect_layout(output.name, shape)
    objectness = 1 if layout == "yolov5" else 0
    channels = shape[2] if layout == "yolov5" else shape[1]
    num_classes = channels - 4 - objectness
    if not isinstance(num_classes, int) or num_classes < 1:
        raise InputError(
            f"output '{output.name}' {list(shape)} is not a {layout} output: its "
            f"{'last' if layout == 'yolov5' else 'second'} axis must be {4 + objectness} + "
            "number of classes",
            reference=Ref.BAD_YOLO_HEAD,
        )
    taken = _value_names(graph)
    source = output.name
    nodes = []
    if layout == "yolov5":
        transposed = _fresh(f"{source}_channel_major", taken)
        nodes.append(
            onnx.helper.make_node(
                "Transpose", [source], [transposed], perm=[0, 2, 1], name=f"{source}/transpose"
            )
        )
        source = transposed
    outputs = [_fresh(name, taken) for name in OUTPUT_NAMES]
    head = YOLO_HEAD.make_node(
        [source],
        outputs,
        num_classes=num_classes,
        objectness=objectness,
        score_threshold=options.score_threshold,
        iou_threshold=options.iou_threshold,
        max_detections=options.max_detections,
        max_per_class=options.max_per_class,
        multi_label=int(options.multi_label),
    )
    head.name = "yolo_head"
    graph.node.extend(nodes + [head])
    head_input = (shape[0], channels, shape[1] if layout == "yolov5" else shape[2])
    _replace_output(graph, output, head, head_input, outputs, options.keep_predictions)
    if not any(entry.domain == "edgefuse" for entry in result.opset_import):
        result.opset_import.append(onnx.helper.make_opsetid("edgefuse", YOLO_HEAD.version))
    return attach_functions(result)


def _pick_output(model: onnx.ModelProto, name: str | None) -> onnx.ValueInfoProto:
    outputs = list(model.graph.output)
    if name is not None:
        match = [o for o in outputs if o.name == name]
        if not match:
            raise InputError(
                f"the model has no output '{name}'",
                hint="outputs: " + ", ".join(o.name for o in outputs),
                reference=Ref.BAD_YOLO_HEAD,
            )
        return match[0]
    three_d = [o for o in outputs if len(o.type.tensor_type.shape.dim) == 3]
    if len(three_d) != 1:
        raise InputError(
            f"cannot tell which output is the YOLO prediction ({len(three_d)} 3-D outputs)",
            hint="name it: YoloHeadOptions(output=...)",
            reference=Ref.BAD_YOLO_HEAD,
        )
    return three_d[0]


def _static_dims(output: onnx.ValueInfoProto) -> tuple:
    dims = tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
        for d in output.type.tensor_type.shape.dim
    )
    if len(dims) != 3:
        raise InputError(
            f"output '{output.name}' has shape {list(dims)}; a YOLO output is 3-D",
            reference=Ref.BAD_YOLO_HEAD,
        )
    return dims


def _detect_layout(name: str, shape: tuple) -> str:
    _, a, b = shape
    if isinstance(a, int) and isinstance(b, int) and a != b:
        short, long_ = min(a, b), max(a, b)
        if long_ >= 4 * short:  # N boxes is far larger than the channel count
            return "yolov8" if a < b else "yolov5"
    raise InputError(
        f"cannot tell whether output '{name}' {list(shape)} is YOLOv5 [B, N, 5+C] or "
        "YOLOv8 [B, 4+C, N]",
        hint="pass layout='yolov5' or layout='yolov8'",
        reference=Ref.BAD_YOLO_HEAD,
    )


def _value_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names |= {init.name for init in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def _fresh(name: str, taken: set[str]) -> str:
    candidate, index = name, 1
    while candidate in taken:
        candidate, index = f"{name}_{index}", index + 1
    taken.add(candidate)
    return candidate


def _replace_output(graph, output, head, head_input, names, keep_predictions: bool) -> None:
    elem_type = output.type.tensor_type.elem_type
    shapes = YOLO_HEAD.infer_shapes(
        [head_input], **{a.name: onnx.helper.get_attribute_value(a) for a in head.attribute}
    )
    int32 = onnx.TensorProto.INT32
    types = (elem_type, elem_type, int32, int32)
    new_outputs = [
        onnx.helper.make_tensor_value_info(name, dtype, list(shape))
        for name, dtype, shape in zip(names, types, shapes, strict=True)
    ]
    kept = [o for o in graph.output if o.name != output.name or keep_predictions]
    del graph.output[:]
    graph.output.extend(kept + new_outputs)
