"""Detector outputs to boxes in frame pixels: every layout, its candidate rule, NMS, the way back.

Why one rule per layout, each its project's own, since a decoder for the wrong layout "works"
badly rather than failing (the layouts and how they are told apart: ``recognise``):

- ``yolov8`` ``[1, 4+C, N]``: cx, cy, w, h in input pixels, then C class scores; a box is a
  candidate when its best class score is strictly above ``conf``; no objectness (Ultralytics
  ``ops.non_max_suppression``, shared/reference/apps-and-pipelines.md §2.1-2.2).
- ``yolov5`` ``[1, N, 5+C]`` (v5, v7, a YOLOX exported decoded): cx, cy, w, h, objectness, C
  class probabilities; candidates have objectness > ``conf``, their score is objectness x class
  probability, kept when > ``conf``.
- ``yolo_head``: the model ends in edgefuse's YoloHead op, which already decoded and ran NMS on
  the device (``boxes [1, D, 4]`` xyxy, ``scores [1, D]``, ``classes [1, D]``,
  ``num_detections [1]``); only the first ``num_detections`` rows count. ``conf`` and
  ``classes`` still filter them here, ``iou`` was fixed when the head was appended.
- ``yolox`` raw head: grid and stride decoding (``yolox``), YOLOX's class-agnostic NMS with its
  ``+1`` pixel IoU.
- ``end2end``: ``[1, K, 6]`` and DETR outputs, no NMS (``nms_free``).
- ``ppyoloe``: PP-YOLOE boxes + scores and PicoDet's per-stride heads (``paddle_heads``), with
  Paddle's multi-class NMS (a box may be kept once per class above ``conf``).

For the Ultralytics layouts each box takes its best class only (their predict default,
``multi_label=False``); at most ``max_nms`` candidates (best first) enter class-aware NMS
(``agnostic`` turns classes off; ``None`` keeps each layout's own choice), then the best
``max_det`` are mapped back through the frame's letterbox geometry and clipped to it. The
candidate filter reduces over the class axis first and gathers only the survivors, so the
[84, 8400] output of a YOLOv8 is touched once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.metrics.detect import Detections
from edgefuse.model_info import DETECT_LAYOUTS
from edgefuse.nms import nms
from edgefuse.preprocess import Geometry
from edgefuse.vision.detect import nms_free, paddle_heads, yolox
from edgefuse.vision.detect.heads import HEAD_OUTPUTS, Heads, head_outputs
from edgefuse.vision.detect.recognise import Evidence, bind

LAYOUTS = DETECT_LAYOUTS
__all__ = ["HEAD_OUTPUTS", "LAYOUTS", "DetectOptions", "decode", "head_outputs", "raw_output"]
# YOLOX's demo NMS measures boxes as (x2 - x1 + 1) x (y2 - y1 + 1): the same IoU as adding one
# pixel to x2 and y2 (demo_utils.nms), which is how it is reproduced here.
PIXEL_INCLUSIVE = np.array([0, 0, 1, 1], np.float32)


@dataclasses.dataclass(frozen=True)
class DetectOptions:
    """Thresholds and limits; the defaults are Ultralytics' predict defaults (v5's IoU)."""

    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    classes: tuple[int, ...] | None = None  # keep only these class ids
    agnostic: bool | None = None  # None: the layout's own (YOLOX one NMS over all classes)
    max_nms: int = 30000
    strides: tuple[int, ...] | None = None  # yolox / PicoDet heads (None: from the shapes)


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
           options: DetectOptions = DetectOptions(), heads: Heads | None = None) -> Detections:
    """The model's outputs -> detections in frame pixels (boxes xyxy float32, scores, classes).

    ``heads`` binds the layout to output names (``Detector`` binds once when it opens the
    model); without it the layouts with several outputs are bound from the arrays here.
    """
    if layout not in LAYOUTS:
        raise InputError(f"unknown detection layout '{layout}'",
                         hint=f"one of: {', '.join(LAYOUTS)}", reference=Ref.BAD_LAYOUT)
    if heads is None and layout in ("yolox", "end2end", "ppyoloe"):
        specs = [(n, a.shape, a.dtype.name) for n, a in outputs.items()]
        heads = bind(layout, specs, Evidence(geometry.dst_size, strides=options.strides))
    if layout == "yolo_head":
        boxes, scores, classes = _from_head(outputs)
        keep = scores > options.conf
        boxes, scores, classes = _only(options, boxes[keep], scores[keep], classes[keep])
        chosen = np.arange(min(len(scores), options.max_det))
    elif layout == "end2end":
        boxes, scores, classes = _end2end(outputs, heads, geometry, options)
        boxes, scores, classes = _only(options, boxes, scores, classes)
        chosen = np.arange(len(scores))
    else:
        boxes, scores, classes, nms_boxes = _candidates(outputs, layout, heads, geometry, options)
        chosen = nms(nms_boxes, scores, options.iou,
                     None if _agnostic(layout, options) else classes, max_det=options.max_det)
    return Detections(geometry.to_frame(boxes[chosen]), scores[chosen].astype(np.float32),
                      classes[chosen].astype(np.int64))


def _candidates(outputs: Mapping[str, np.ndarray], layout: str, heads: Heads | None,
                geometry: Geometry, options: DetectOptions) -> tuple[np.ndarray, ...]:
    """(boxes, scores, classes, boxes for the NMS) that go into NMS, at most ``max_nms``."""
    if layout in ("yolov8", "yolov5"):
        output = outputs[heads.names[0]] if heads is not None else raw_output(outputs)
        find = candidates_yolov8 if layout == "yolov8" else candidates_yolov5
        boxes, scores, classes = _only(options, *find(output, options.conf))
    else:
        if layout == "yolox":
            boxes, matrix = yolox.yolox_scores(outputs[heads.names[0]], geometry.dst_size,
                                               heads.strides, options.conf)
        elif heads.form == "pico":
            levels = len(heads.strides)
            boxes, matrix = paddle_heads.pico_scores(
                [outputs[n] for n in heads.names[:levels]],
                [outputs[n] for n in heads.names[levels:]], heads.strides, geometry.dst_size,
                options.conf)
        else:
            boxes, matrix = paddle_heads.ppyoloe_scores(outputs[heads.names[0]],
                                                        outputs[heads.names[1]], options.conf)
        if _agnostic(layout, options):
            boxes, scores, classes = _best_class(boxes, matrix, options.conf)
        else:
            top_k = paddle_heads.NMS_TOP_K if layout == "ppyoloe" else None
            boxes, scores, classes = _multi_label(boxes, matrix, options.conf, top_k)
        boxes, scores, classes = _only(options, boxes, scores, classes)
    if len(scores) > options.max_nms:
        top = np.argsort(-scores, kind="stable")[:options.max_nms]
        boxes, scores, classes = boxes[top], scores[top], classes[top]
    if layout != "yolox":
        return boxes, scores, classes, boxes
    # YOLOX divides by the letterbox ratio first, then runs its +1 pixel NMS (in frame pixels,
    # unclipped): the +1 does not scale, so the NMS sees the boxes where YOLOX's does.
    scale = np.array([geometry.scale_x, geometry.scale_y] * 2, np.float32)
    pad = np.array([geometry.pad_left, geometry.pad_top] * 2, np.float32)
    return boxes, scores, classes, (boxes - pad) / scale + PIXEL_INCLUSIVE


def _end2end(outputs: Mapping[str, np.ndarray], heads: Heads, geometry: Geometry,
             options: DetectOptions) -> tuple[np.ndarray, ...]:
    if heads.form == "k6":
        boxes, scores, classes = nms_free.end2end_rows(outputs[heads.names[0]], options.conf,
                                                       options.max_det)
        if heads.box_format == "cxcywh":
            boxes = nms_free.normalised_cxcywh_to_xyxy(boxes, geometry.dst_size)
        return boxes, scores, classes
    return nms_free.detr_top(outputs[heads.names[0]], outputs[heads.names[1]],
                             geometry.dst_size, logits=heads.logits, conf=options.conf,
                             top=options.max_det)


def _agnostic(layout: str, options: DetectOptions) -> bool:
    return options.agnostic if options.agnostic is not None else layout == "yolox"


def _only(options: DetectOptions, boxes: np.ndarray, scores: np.ndarray,
          classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the wanted classes (all when ``options.classes`` is None)."""
    if options.classes is None:
        return boxes, scores, classes
    wanted = np.isin(classes, options.classes)
    return boxes[wanted], scores[wanted], classes[wanted]


def _best_class(boxes: np.ndarray, matrix: np.ndarray, conf: float) -> tuple[np.ndarray, ...]:
    """Each box with its best class, when that score is above ``conf``."""
    classes = matrix.argmax(axis=1)
    scores = matrix[np.arange(len(matrix)), classes]
    keep = scores > conf
    return boxes[keep], scores[keep].astype(np.float32), classes[keep]


def _multi_label(boxes: np.ndarray, matrix: np.ndarray, conf: float,
                 top_k: int | None) -> tuple[np.ndarray, ...]:
    """Every (box, class) above ``conf`` (at most ``top_k`` best per class), for per-class NMS."""
    rows, classes = np.nonzero(matrix > conf)
    scores = matrix[rows, classes].astype(np.float32)
    if top_k is not None and len(scores):
        order = np.lexsort((-scores, classes))  # by class, best first within each
        rank = np.arange(len(order)) - np.searchsorted(classes[order], classes[order])
        keep = order[rank < top_k]
        rows, classes, scores = rows[keep], classes[keep], scores[keep]
    return boxes[rows], scores, classes


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
