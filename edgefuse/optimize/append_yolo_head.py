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

The app info a model carries (``edgefuse.model_info``) is updated with it: its layout becomes
``yolo_head`` (the app reads the op's rows), else an app told ``yolov8`` would refuse the outputs
it now has; the rest of the info (classes, preprocessing, thresholds) stays.

Layout detection (``layout="auto"``): the axis with 5 + C (v5) or 4 + C (v8) entries is the
short one, N is in the thousands; when the shape cannot tell (both axes small, or C unknown),
the caller must name the layout.
"""

from __future__ import annotations

import dataclasses

import onnx
import onnx.helper
import onnx.shape_inference

from edgefuse import model_info
from edgefuse.acl.ops.host import attach_functions
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.errors import InputError, Ref

LAYOUTS = ("auto", "yolov5", "yolov8")
APP_LAYOUT = "yolo_head"  # how the apps read the op's outputs (model_info.DETECT_LAYOUTS)
OUTPUT_NAMES = ("boxes", "scores", "classes", "num_detections")
# The user-facing keys (``--yolo-head conf=0.25,iou=0.45,max_det=300``, the build spec's
# ``optimize.yolo_head``): Ultralytics' predict argument names, then YoloHeadOptions' fields.
OPTION_KEYS = {
    "conf": "score_threshold",
    "iou": "iou_threshold",
    "max_det": "max_detections",
    "max_per_class": "max_per_class",
    "multi_label": "multi_label",
    "layout": "layout",
    "output": "output",
}


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


def parse_yolo_head(text: str, where: str = "--yolo-head") -> YoloHeadOptions:
    """Options from ``conf=0.25,iou=0.45,max_det=300`` (every key optional; "" = defaults)."""
    given: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key or not value:
            raise _option_error(f"{where}: '{part}' is not KEY=VALUE",
                                "write e.g. conf=0.25,iou=0.45,max_det=300")
        if key in given:
            raise _option_error(f"{where}: {key} is given twice", f"keep one {key}=...")
        given[key] = value
    return yolo_head_options(given, where)


def yolo_head_options(values: dict, where: str = "yolo_head") -> YoloHeadOptions:
    """Options from a mapping of the user-facing keys (``OPTION_KEYS``), values checked."""
    unknown = sorted(set(values) - set(OPTION_KEYS))
    if unknown:
        raise _option_error(f"{where}: unknown key {', '.join(unknown)}",
                            f"the keys: {', '.join(OPTION_KEYS)}")
    fields = {}
    for key, value in values.items():
        fields[OPTION_KEYS[key]] = _option_value(key, value, where)
    return YoloHeadOptions(**fields)


def _option_value(key: str, value, where: str):
    text = str(value).strip()
    if key in ("conf", "iou"):
        number = _number(text, float)
        if number is None or not 0.0 <= number <= 1.0:
            raise _option_error(f"{where}: {key} must be a number from 0 to 1, got '{text}'",
                                f"e.g. {key}={0.25 if key == 'conf' else 0.45}")
        return number
    if key in ("max_det", "max_per_class"):
        number = _number(text, int)
        low = 1 if key == "max_det" else 0
        if number is None or number < low:
            raise _option_error(f"{where}: {key} must be an integer >= {low}, got '{text}'",
                                f"e.g. {key}={300 if key == 'max_det' else 0}"
                                + (" (0: max_det)" if key == "max_per_class" else ""))
        return number
    if key == "multi_label":
        flags = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
        if text.lower() not in flags:
            raise _option_error(f"{where}: multi_label must be true or false, got '{text}'",
                                "multi_label=true lets a box compete in every class")
        return flags[text.lower()]
    if key == "layout" and text not in LAYOUTS:
        raise _option_error(f"{where}: layout must be one of {', '.join(LAYOUTS)}, got '{text}'",
                            "auto tells YOLOv5 from YOLOv8 by the output's shape")
    return text


def _number(text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        return None


def _option_error(message: str, hint: str) -> InputError:
    return InputError(message, hint=hint, reference=Ref.BAD_YOLO_HEAD_OPTION)


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
    return _read_as_head(attach_functions(result))


def _read_as_head(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the app info it carries (if any) saying its outputs read as the head's."""
    info = model_info.from_onnx(model)
    if info is None or info.postprocess.layout == APP_LAYOUT:
        return model
    post = dataclasses.replace(info.postprocess, layout=APP_LAYOUT)
    return model_info.embed(model, dataclasses.replace(info, postprocess=post))


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
