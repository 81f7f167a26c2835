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


def label_of(names: Sequence[str], class_id: int) -> str:
    return names[class_id] if 0 <= class_id < len(names) else f"class{class_id}"


def text_colour(background: Sequence[int]) -> tuple[int, int, int]:
    """White on dark label backgrounds, black on light ones (BGR luma above 160)."""
    blue, green, red = (int(c) for c in background)
    return (0, 0, 0) if 0.114 * blue + 0.587 * green + 0.299 * red > 160 else (255, 255, 255)


def draw_detections(frame: np.ndarray, detections: Detections, names: Sequence[str],
                    colours: np.ndarray, *, line_width: int | None = None,
                    labels: bool = True) -> np.ndarray:
    """A copy of ``frame`` with each box and "name score"; ``colours`` BGR [N, 3], by class."""
    out = frame.copy()
    width = line_width or max(round(sum(frame.shape[:2]) / 2 * 0.003), 1)
    font_scale = width / 3
    for box, score, class_id in zip(detections.boxes, detections.scores, detections.classes,
                                    strict=True):
        colour = tuple(int(c) for c in colours[int(class_id) % len(colours)])
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        cv2().rectangle(out, (x1, y1), (x2, y2), colour, width)
        if not labels:
            continue
        text = f"{label_of(names, int(class_id))} {float(score):.2f}"
        (text_w, text_h), base = cv2().getTextSize(text, 0, font_scale, max(width - 1, 1))
        above = y1 - text_h - base >= 0
        top = y1 - text_h - base if above else y1
        cv2().rectangle(out, (x1, top), (x1 + text_w, top + text_h + base), colour, -1)
        cv2().putText(out, text, (x1, top + text_h), 0, font_scale, text_colour(colour),
                      max(width - 1, 1), cv2().LINE_AA)
    return out


def overlay(frame: np.ndarray, class_map: np.ndarray, colours: np.ndarray, *,
            alpha: float = 0.5, background: int | None = 0, outline: bool = False) -> np.ndarray:
    """``frame`` with the class map's colours (BGR [N, 3], by class id) blended in.

    ``outline`` draws each region's border in the complement of its colour: a blend is invisible
    where an object already has its class's palette colour, its border never is.
    """
    coloured = colours.take(class_map, axis=0, mode="wrap")
    blended = cv2().addWeighted(frame, 1.0 - alpha, coloured, alpha, 0.0)
    if background is None:
        out = blended
    else:
        out = frame.copy()
        np.copyto(out, blended, where=(class_map != background)[..., np.newaxis])
    if outline:
        border = _region_borders(class_map)
        if background is not None:
            border &= class_map != background
        out[border] = 255 - coloured[border]
    return out


def draw_masks(frame: np.ndarray, masks: Sequence[Any], classes: Sequence[int],
               colours: np.ndarray, *, alpha: float = 0.5) -> np.ndarray:
    """A copy of ``frame`` with instance masks filled in their class colour and outlined.

    ``masks[i]`` has ``x``, ``y`` (its top-left pixel in the frame) and ``mask`` (bool);
    ``classes[i]`` picks its colour (BGR [N, 3]). Masks are blended in reverse order, so the
    first (the best-scored) lies on top where instances overlap, then every outline is drawn at
    full strength in its class colour, so touching instances of one class stay apart.
    """
    out = frame.copy()
    width = max(round(sum(frame.shape[:2]) / 2 * 0.003), 1)
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


def _region_borders(class_map: np.ndarray) -> np.ndarray:
    """Pixels whose right, left, lower or upper neighbour has another class."""
    border = np.zeros(class_map.shape, bool)
    horizontal = class_map[:, 1:] != class_map[:, :-1]
    vertical = class_map[1:] != class_map[:-1]
    border[:, 1:] |= horizontal
    border[:, :-1] |= horizontal
    border[1:] |= vertical
    border[:-1] |= vertical
    return border
