"""What an Ultralytics export says about itself, as edgefuse app info.

Why: ``model.export(format="onnx")`` writes the model's class names, input size, task, head and
export mode into the ONNX ``metadata_props`` (``ultralytics/engine/exporter.py``, the
``self.metadata`` dict; ``nn/autobackend.py`` reads them back the same way), and Ultralytics'
own predictor decodes with them. A model that says where it comes from is decoded as that
project decodes it, with its names, instead of as ``class16``.

Keys read (8.1 to 8.4; each optional except ``names``, older exports write fewer):

- ``names``: a Python dict literal ``{0: 'person', ...}``, parsed with ``ast.literal_eval``
  (never evaluated); ``imgsz``: ``[h, w]``; ``task``: detect / segment / classify / pose / obb;
- ``head`` (8.4): the last module's class. ``RTDETRDecoder`` is Ultralytics' RT-DETR, whose
  export is ``[1, 300, 6]`` normalised cx, cy, w, h, score, class (``nn/modules/head.py``
  ``RTDETRDecoder.postprocess``) and whose predictor stretches the frame to the input
  (``models/rtdetr/predict.py``: ``scale_fill = True``, i.e. ``LetterBox(auto=False,
  scale_fill=True)``) and scales the boxes by the frame's width and height;
- ``end2end`` (8.3.x on): ``True`` for the NMS-free ``[1, max_det, 6]`` export (``nms=False``),
  x1, y1, x2, y2 in input pixels (``Detect.postprocess``); ``False`` for ``[1, 4 + C, N]``.

The family's predict defaults (``ultralytics/cfg/default.yaml``): ``conf`` 0.25 (predict),
``iou`` 0.7, ``max_det`` 300, ``agnostic_nms: False`` (class-aware NMS); letterbox centred on
114, RGB, /255 (``engine/predictor.py``, ``data/augment.py`` ``LetterBox``).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping
from typing import Any

import onnx

from edgefuse.errors import InputError, Ref
from edgefuse.model_info import TASKS, AppInfo, Postprocess
from edgefuse.preprocess import Preprocess

CONF, IOU, MAX_DET = 0.25, 0.7, 300  # ultralytics/cfg/default.yaml (predict)
DETR_HEADS = ("RTDETRDecoder",)


@dataclasses.dataclass(frozen=True)
class UltralyticsRecord:
    """The app info an Ultralytics export implies, and what said so (for the start line)."""

    info: AppInfo
    who: str  # "Ultralytics 8.4.190"
    model: str  # "YOLOv8n", "RT-DETR-l", ... (the description's model name, else the head)
    layout_why: str  # "head Detect, end2end False"


def is_ultralytics(props: Mapping[str, str]) -> bool:
    return props.get("author") == "Ultralytics" or props.get("description", "").startswith(
        "Ultralytics")


def read(model: onnx.ModelProto, where: str = "") -> UltralyticsRecord | None:
    """The record of an Ultralytics export; None for any other model."""
    props = {p.key: p.value for p in model.metadata_props}
    if not is_ultralytics(props) or "names" not in props:
        return None
    where = f"{where} Ultralytics metadata_props".strip()
    classes = _names(props["names"], where)
    task = props.get("task")
    if task is not None and task not in TASKS:
        raise InputError(f"{where}: the model is an Ultralytics '{task}' model; edgefuse's apps "
                         f"read {', '.join(TASKS)} models", reference=Ref.WRONG_MODEL_KIND)
    head = props.get("head", "")
    detr = head in DETR_HEADS
    end2end = _boolean(props.get("end2end"), "end2end", where)
    size = _size(props.get("imgsz"), where)
    layout, box_format, why = _layout(task, head, detr, end2end)
    preprocess = None
    if size is not None:
        preprocess = Preprocess(size=size, resize="stretch" if detr else "letterbox")
    postprocess = Postprocess(layout=layout, conf=CONF, iou=IOU, max_det=MAX_DET,
                              box_format=box_format)
    version = props.get("version", "")
    who = f"Ultralytics {version}".strip()
    description = props.get("description", "")
    name = description.removeprefix("Ultralytics ").split(" model")[0].strip() or head or "model"
    return UltralyticsRecord(AppInfo(task, classes, preprocess, postprocess), who, name, why)


def _layout(task: str | None, head: str, detr: bool, end2end: bool | None
            ) -> tuple[str | None, str | None, str]:
    said = ", ".join(p for p in (f"head {head}" if head else "",
                                 f"end2end {end2end}" if end2end is not None else "") if p)
    if detr:
        return "end2end", "cxcywh", said
    if task == "segment":
        return ("yolov8_seg", None, said) if end2end is False else (None, None, said)
    if task != "detect" or end2end is None:
        return None, None, said  # older exports: the outputs and the graph tell
    return ("end2end", "xyxy", said) if end2end else ("yolov8", None, said)


def _names(text: str, where: str) -> tuple[str, ...]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise _bad(f"'names' is not a dict literal ({type(exc).__name__})", where) from None
    if isinstance(value, list):
        value = dict(enumerate(value))
    if not isinstance(value, dict) or not all(isinstance(k, int) for k in value):
        raise _bad("'names' must map class ids to names, like {0: 'person', 1: 'bicycle'}",
                   where)
    if sorted(value) != list(range(len(value))):
        raise _bad(f"'names' must number its classes 0 to {len(value) - 1}, got ids "
                   f"{sorted(value)[:10]}", where)
    return tuple(str(value[i]) for i in range(len(value)))


def _size(text: str | None, where: str) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        value: Any = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _bad(f"'imgsz' is not a size such as [640, 640], got {text[:40]!r}",
                   where) from None
    if isinstance(value, int):
        value = [value, value]
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and v > 0 for v in value)):
        raise _bad(f"'imgsz' is not a size such as [640, 640], got {text[:40]!r}", where)
    return int(value[0]), int(value[1])


def _boolean(text: str | None, key: str, where: str) -> bool | None:
    if text is None:
        return None
    if text not in ("True", "False"):
        raise _bad(f"'{key}' is 'True' or 'False', got {text[:40]!r}", where)
    return text == "True"


def _bad(message: str, where: str) -> InputError:
    return InputError(f"{where}: {message}",
                      hint="re-export the model with Ultralytics, or give the model edgefuse app "
                           "info (which takes precedence over the exporter's record)",
                      reference=Ref.BAD_APP_INFO)
