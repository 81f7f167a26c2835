"""DB post-processing: a text probability map to word boxes, as PaddleOCR's ``DBPostProcess``.

Why this rule (``ppocr/postprocess/db_postprocess.py``, ``polygon`` off): the map is thresholded
at 0.3; each region's outline gets its minimum-area rectangle; a rectangle whose short side is
under 3 pixels, or whose mean probability is under 0.6, is dropped; the rest are grown by DB's
unclip offset ``d = A * ratio / L`` (A the rectangle's area, L its perimeter, ratio 1.5), which
undoes the shrink the training target was drawn with (``text_scenes.shrink_distance``) up to the
ratio. For a rectangle, PaddleOCR's polygon offset (pyclipper, round joins) followed by a
minimum-area rectangle is the rectangle grown by ``d`` on every side, which is computed here
directly.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from edgefuse._cv import cv2 as _cv2
from edgefuse.errors import InputError, Ref

THRESHOLD = 0.3
BOX_THRESHOLD = 0.6
UNCLIP_RATIO = 1.5
MIN_SIZE = 3.0


@dataclasses.dataclass(frozen=True)
class TextBox:
    """A word found on the map: ``quad`` [4, 2] float32 corners (OpenCV pixel coordinates of the
    map), ``score`` the mean probability inside the rectangle before it was grown."""

    quad: np.ndarray
    score: float


def text_boxes(probability: np.ndarray, *, threshold: float = THRESHOLD,
               box_threshold: float = BOX_THRESHOLD, unclip_ratio: float = UNCLIP_RATIO,
               min_size: float = MIN_SIZE) -> list[TextBox]:
    """The words on one map, ``[H, W]`` or ``[1, 1, H, W]`` probabilities in 0..1."""
    cv2 = _cv2()
    prob = np.asarray(probability, dtype=np.float32)
    if prob.ndim == 4 and prob.shape[:2] == (1, 1):
        prob = prob[0, 0]
    if prob.ndim != 2:
        raise InputError(f"a text probability map is [H, W] or [1, 1, H, W], got "
                         f"{list(np.shape(probability))}", reference=Ref.BAD_LAYOUT)
    bitmap = (prob > threshold).astype(np.uint8)
    contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    boxes = []
    for contour in contours:
        (cx, cy), (width, height), angle = cv2.minAreaRect(contour)
        if min(width, height) < min_size:
            continue
        score = _mean_inside(prob, cv2.boxPoints(((cx, cy), (width, height), angle)), cv2)
        if score < box_threshold:
            continue
        grow = width * height * unclip_ratio / (2.0 * (width + height))
        width, height = width + 2 * grow, height + 2 * grow
        if min(width, height) < min_size + 2:
            continue
        quad = cv2.boxPoints(((cx, cy), (width, height), angle)).astype(np.float32)
        boxes.append(TextBox(quad, score))
    return boxes


def _mean_inside(prob: np.ndarray, quad: np.ndarray, cv2) -> float:
    """PaddleOCR's ``box_score_fast``: the mean of ``prob`` over the pixels of ``quad``."""
    height, width = prob.shape
    x0 = int(np.clip(np.floor(quad[:, 0].min()), 0, width - 1))
    x1 = int(np.clip(np.ceil(quad[:, 0].max()), 0, width - 1))
    y0 = int(np.clip(np.floor(quad[:, 1].min()), 0, height - 1))
    y1 = int(np.clip(np.ceil(quad[:, 1].max()), 0, height - 1))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    cv2.fillPoly(mask, [np.round(quad - (x0, y0)).astype(np.int32)], 1)
    return float(cv2.mean(prob[y0:y1 + 1, x0:x1 + 1], mask)[0])
