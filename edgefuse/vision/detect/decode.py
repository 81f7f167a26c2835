"""YOLO outputs to boxes in frame pixels: the v5, v8 and device-head layouts, NMS, the way back.

Why these rules (Ultralytics' ``non_max_suppression``, shared/reference/apps-and-pipelines.md
§2.1-2.2), since a v5 decoder on a v8 output "works" badly rather than failing:

- ``yolov8`` ``[1, 4+C, N]``: cx, cy, w, h in input pixels, then C class scores; a box is a
  candidate when its best class score is strictly above ``conf``; no objectness.
- ``yolov5`` ``[1, N, 5+C]``: cx, cy, w, h, objectness, C class probabilities; candidates have
  objectness > ``conf``, their score is objectness x class probability, kept when > ``conf``.
- ``yolo_head``: the model ends in edgefuse's YoloHead op, which already decoded and ran NMS on
  the device (``boxes [1, D, 4]`` xyxy, ``scores [1, D]``, ``classes [1, D]``,
  ``num_detections [1]``); only the first ``num_detections`` rows count. ``conf`` and
  ``classes`` still filter them here, ``iou`` was fixed when the head was appended.

Each box takes its best class only (Ultralytics' predict default, ``multi_label=False``); at most
``max_nms`` candidates (best first) enter class-aware NMS (``agnostic`` turns classes off), then
the best ``max_det`` are mapped back through the frame's letterbox geometry and clipped to it.
The candidate filter reduces over the class axis first and gathers only the survivors, so the
[84, 8400] output of a YOLOv8 is touched once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.metrics.detect import Detections
from edgefuse.nms import nms
from edgefuse.preprocess import Geometry

LAYOUTS = ("yolov8", "yolov5", "yolo_head")
HEAD_OUTPUTS = ("boxes", "scores", "classes", "num_detections")


@dataclasses.dataclass(frozen=True)
class DetectOptions:
    """Thresholds and limits; the defaults are Ultralytics' predict defaults (v5's IoU)."""

    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    classes: tuple[int, ...] | None = None  # keep only these class ids
    agnostic: bool = False
    max_nms: int = 30000


def candidates_yolov8(output: np.ndarray, conf: float) -> tuple[np.ndarray, ...]:
    """(xyxy boxes, scores, classes) of the boxes whose best class score is above ``conf``."""
    rows = _single(output, "yolov8")  # [4 + C, N]
    class_scores = rows[4:]
    best = class_scores.max(axis=0)
    picked = np.flatnonzero(best > conf)
    chosen = rows[:, picked]
    classes = chosen[4:].argmax(axis=0)
    return _xywh_to_xyxy(chosen[:4].T), best[picked], classes


def candidates_yolov5(output: np.ndarray, conf: float) -> tuple[np.ndarray, ...]:
    """(xyxy boxes, scores, classes): objectness > ``conf``, then objectness x class > ``conf``."""
    rows = _single(output, "yolov5")  # [N, 5 + C]
    chosen = rows[rows[:, 4] > conf]
    scores_all = chosen[:, 5:] * chosen[:, 4:5]
    classes = scores_all.argmax(axis=1)
    scores = scores_all[np.arange(len(chosen)), classes]
    keep = scores > conf
    return _xywh_to_xyxy(chosen[keep, :4]), scores[keep], classes[keep]


def decode(outputs: Mapping[str, np.ndarray], layout: str, geometry: Geometry,
           options: DetectOptions = DetectOptions()) -> Detections:
    """The model's outputs -> detections in frame pixels (boxes xyxy float32, scores, classes)."""
    if layout == "yolo_head":
        boxes, scores, classes = _from_head(outputs)
        keep = scores > options.conf
        boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
        if options.classes is not None:
            wanted = np.isin(classes, options.classes)
            boxes, scores, classes = boxes[wanted], scores[wanted], classes[wanted]
        chosen = np.arange(min(len(scores), options.max_det))
    else:
        output = raw_output(outputs)
        if layout == "yolov8":
            boxes, scores, classes = candidates_yolov8(output, options.conf)
        elif layout == "yolov5":
            boxes, scores, classes = candidates_yolov5(output, options.conf)
        else:
            raise InputError(f"unknown detection layout '{layout}'",
                             hint=f"one of: {', '.join(LAYOUTS)}", reference=Ref.BAD_LAYOUT)
        if options.classes is not None:
            wanted = np.isin(classes, options.classes)
            boxes, scores, classes = boxes[wanted], scores[wanted], classes[wanted]
        if len(scores) > options.max_nms:
            top = np.argsort(-scores, kind="stable")[:options.max_nms]
            boxes, scores, classes = boxes[top], scores[top], classes[top]
        chosen = nms(boxes, scores, options.iou, None if options.agnostic else classes,
                     max_det=options.max_det)
    return Detections(geometry.to_frame(boxes[chosen]), scores[chosen].astype(np.float32),
                      classes[chosen].astype(np.int64))


def raw_output(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The YOLO prediction among the outputs: the only (or first) 3-D floating output."""
    for array in outputs.values():
        if array.ndim == 3 and np.issubdtype(array.dtype, np.floating):
            return array
    raise InputError(
        "the model has no 3-D output to decode as YOLO",
        context="outputs: " + ", ".join(f"{n} {list(a.shape)}" for n, a in outputs.items()),
        reference=Ref.BAD_LAYOUT,
    )


def head_outputs(outputs: Mapping[str, np.ndarray] | Sequence[tuple[str, tuple, str]]
                 ) -> dict[str, str] | None:
    """Which output is which of a YoloHead's four (by rank and dtype), or None when not a head.

    Takes arrays or (name, shape, dtype name) triples, so the layout can be told before a run.
    """
    items = ([(n, a.shape, a.dtype.name) for n, a in outputs.items()]
             if isinstance(outputs, Mapping) else list(outputs))
    if len(items) != 4:
        return None
    found: dict[str, str] = {}
    for name, shape, dtype in items:
        integer = dtype.startswith("int")
        if len(shape) == 1 and integer:
            found["num_detections"] = name
        elif len(shape) == 3 and shape[-1] == 4 and not integer:
            found["boxes"] = name
        elif len(shape) == 2 and integer:
            found["classes"] = name
        elif len(shape) == 2:
            found["scores"] = name
    return found if len(found) == 4 else None


def _from_head(outputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    names = head_outputs(outputs)
    if names is None:
        raise InputError(
            "the outputs are not a YoloHead's boxes, scores, classes and num_detections",
            context="outputs: " + ", ".join(f"{n} {list(a.shape)}" for n, a in outputs.items()),
            reference=Ref.BAD_LAYOUT,
        )
    count = int(outputs[names["num_detections"]].reshape(-1)[0])
    return (outputs[names["boxes"]][0, :count].astype(np.float32),
            outputs[names["scores"]][0, :count].astype(np.float32),
            outputs[names["classes"]][0, :count].astype(np.int64))


def _single(output: np.ndarray, layout: str) -> np.ndarray:
    if output.ndim != 3 or output.shape[0] != 1:
        raise InputError(f"a {layout} output is [1, ...] with 3 axes, got {list(output.shape)}",
                         reference=Ref.BAD_LAYOUT)
    rows = output[0]
    return rows.astype(np.float32, copy=False)


def _xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    half = xywh[:, 2:4] / 2
    return np.concatenate([xywh[:, :2] - half, xywh[:, :2] + half], axis=1).astype(np.float32)
