"""Annotated frames: boxes with labels, and class maps blended over the frame.

Why OpenCV for all of it: its rectangle, text and ``addWeighted`` run in C++ with the GIL
released, so drawing overlaps inference in the pipeline's sink thread. Frames are BGR uint8 and
never modified in place (the caller may still hold them). The overlay blends only pixels outside
the background class, ``out = (1 - alpha) * frame + alpha * colour`` rounded as OpenCV does, so
an empty map leaves the frame untouched (OpenVINO blends everywhere, which darkens the whole
frame with the background's black).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.metrics.detect import Detections
from edgefuse.vision.draw import text
from edgefuse.vision.draw.labels import LabelPlacer
from edgefuse.vision.draw.text import Rect, TextStyle

FILL_ALPHA = 0.3  # light enough that the object under a class colour still shows


def label_of(names: Sequence[str], class_id: int) -> str:
    return names[class_id] if 0 <= class_id < len(names) else f"class{class_id}"


def label_text(names: Sequence[str], class_id: int, score: float,
               track_id: int | None = None) -> str:
    """``#7 person 0.91`` (the track ID first, when tracked), ``person 0.91`` otherwise."""
    named = f"{label_of(names, class_id)} {score:.2f}"
    return named if track_id is None else f"#{track_id} {named}"


def place_labels(detections: Detections, names: Sequence[str], style: TextStyle,
                 placer: LabelPlacer, ids: Sequence[int] | None = None,
                 ) -> list[tuple[int, str, Rect]]:
    """(detection index, text, rectangle) of each object's one label, best score placed first
    (see ``labels.py``; an object for which no spot is free has none); ``ids`` are the track
    IDs, one per detection (-1: not tracked)."""
    placed = []
    for index in np.argsort(-np.asarray(detections.scores, np.float64), kind="stable"):
        index = int(index)
        track_id = None if ids is None or int(ids[index]) < 0 else int(ids[index])
        label = label_text(names, int(detections.classes[index]),
                           float(detections.scores[index]), track_id)
        rect = placer.place(style.size(label), detections.boxes[index])
        if rect is not None:
            placed.append((index, label, rect))
    return placed


def draw_detections(frame: np.ndarray, detections: Detections, names: Sequence[str],
                    colours: np.ndarray, *, line_width: int | None = None,
                    labels: bool = True, ids: Sequence[int] | None = None,
                    placer: LabelPlacer | None = None) -> np.ndarray:
    """A copy of ``frame`` with each box and one label (``#id name score``); ``colours`` BGR
    [N, 3], by class. Every box is drawn before any label, so no box crosses a label; labels
    stay inside the frame and off each other and off what ``placer`` already holds."""
    out = frame.copy()
    height, width = frame.shape[:2]
    stroke = line_width or text.line_width(height, width)
    for box, class_id in zip(detections.boxes, detections.classes, strict=True):
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        cv2().rectangle(out, (x1, y1), (x2, y2), _colour(colours, class_id), stroke)
    if labels:
        style = TextStyle.for_frame(height, width)
        for index, label, rect in place_labels(detections, names, style,
                                               placer or LabelPlacer(width, height), ids):
            style.draw(out, label, rect, _colour(colours, detections.classes[index]))
    return out


def overlay(frame: np.ndarray, class_map: np.ndarray, colours: np.ndarray, *,
            alpha: float = FILL_ALPHA, background: int | None = 0,
            outline: bool = False) -> np.ndarray:
    """``frame`` with the class map's colours (BGR [N, 3], by class id) blended in.

    ``outline`` draws each region's border, inside the region, at full strength in its class
    colour (the frame size's stroke): a light fill keeps the object visible, the outline says
    which class it is, whatever colour the object has.
    """
    coloured = colours.take(class_map, axis=0, mode="wrap")
    blended = cv2().addWeighted(frame, 1.0 - alpha, coloured, alpha, 0.0)
    if background is None:
        out = blended
    else:
        out = frame.copy()
        np.copyto(out, blended, where=(class_map != background)[..., np.newaxis])
    if outline:
        border = _region_borders(class_map, text.line_width(*class_map.shape[:2]))
        if background is not None:
            border &= class_map != background
        out[border] = coloured[border]
    return out


def draw_masks(frame: np.ndarray, masks: Sequence[Any], classes: Sequence[int],
               colours: np.ndarray, *, alpha: float = FILL_ALPHA) -> np.ndarray:
    """A copy of ``frame`` with instance masks filled in their class colour and outlined.

    ``masks[i]`` has ``x``, ``y`` (its top-left pixel in the frame) and ``mask`` (bool);
    ``classes[i]`` picks its colour (BGR [N, 3]). Masks are blended in reverse order, so the
    first (the best-scored) lies on top where instances overlap, then every outline is drawn at
    full strength in its class colour, so touching instances of one class stay apart.
    """
    out = frame.copy()
    width = text.line_width(*frame.shape[:2])
    outlines = []
    for item, class_id in reversed(list(zip(masks, classes, strict=True))):
        if not item.mask.any():
            continue
        colour = colours[int(class_id) % len(colours)]
        height, span = item.mask.shape
        region = out[item.y:item.y + height, item.x:item.x + span]
        solid = np.empty_like(region)
        solid[:] = colour
        blended = cv2().addWeighted(region, 1.0 - alpha, solid, alpha, 0.0)
        np.copyto(region, blended, where=item.mask[..., np.newaxis])
        contours = cv2().findContours(item.mask.astype(np.uint8), cv2().RETR_EXTERNAL,
                                      cv2().CHAIN_APPROX_SIMPLE, offset=(item.x, item.y))[0]
        outlines.append((contours, tuple(int(c) for c in colour)))
    for contours, colour in outlines:
        cv2().drawContours(out, contours, -1, colour, width, cv2().LINE_8)
    return out


def _region_borders(class_map: np.ndarray, reach: int = 1) -> np.ndarray:
    """Pixels with a right, left, lower or upper neighbour of another class, and with
    ``reach`` > 1 those with another class within ``reach`` pixels (a square around them, by the
    class map's min and max filters): a band of about ``reach`` pixels each side of a border."""
    border = np.zeros(class_map.shape, bool)
    horizontal = class_map[:, 1:] != class_map[:, :-1]
    vertical = class_map[1:] != class_map[:-1]
    border[:, 1:] |= horizontal
    border[:, :-1] |= horizontal
    border[1:] |= vertical
    border[:-1] |= vertical
    if reach > 1 and class_map.max(initial=0) < 2 ** 16:
        ids = class_map.astype(np.uint16)
        window = np.ones((2 * reach + 1, 2 * reach + 1), np.uint8)
        border |= (cv2().dilate(ids, window) != ids) | (cv2().erode(ids, window) != ids)
    return border


def _colour(colours: np.ndarray, class_id: Any) -> tuple[int, int, int]:
    return tuple(int(c) for c in colours[int(class_id) % len(colours)])  # type: ignore[return-value]
