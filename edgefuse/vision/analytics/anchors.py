"""The point of a box that stands for the object when it crosses a line or stands in a zone.

Why a choice: a camera looking down a street sees a pedestrian's feet touch the ground line
(``bottom_center``, DeepStream's and supervision's default for people and vehicles); a camera
looking straight down sees the box centre (``center``).
"""

from __future__ import annotations

import numpy as np

from edgefuse.errors import InputError, Ref

ANCHORS = ("bottom_center", "center")


def check_anchor(owner: str, anchor: str) -> None:
    """Refuse an anchor name that is not one of ``ANCHORS`` (``owner``: "line 'door'")."""
    if anchor not in ANCHORS:
        raise InputError(f"{owner}: anchor {anchor!r} is not one of {ANCHORS}",
                         reference=Ref.BAD_CONFIG)


def anchor_points(boxes: np.ndarray, anchor: str) -> np.ndarray:
    """[N, 2] points of xyxy boxes."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    x = (boxes[:, 0] + boxes[:, 2]) / 2
    y = boxes[:, 3] if anchor == "bottom_center" else (boxes[:, 1] + boxes[:, 3]) / 2
    return np.stack([x, y], axis=1)


def first_outside(points: np.ndarray, width: int, height: int) -> list[float] | None:
    """The first of ``points`` ([N, 2] pixels) outside a ``width`` x ``height`` frame, or None."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    outside = ((points[:, 0] < 0) | (points[:, 0] > width)
               | (points[:, 1] < 0) | (points[:, 1] > height))
    return points[np.argmax(outside)].tolist() if outside.any() else None
