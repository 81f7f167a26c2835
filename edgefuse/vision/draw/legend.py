"""A legend drawn on the frame: a swatch of each class colour beside the class name.

Why on the frame and not in a side panel: a saved video or image must be readable on its own,
and a side panel would change the frame size the sinks write. The legend sits in the top-left
corner on a dark panel (blended, so the scene still shows through), one row per class, text
scaled with the frame as the box labels are. Only the classes given are listed (the apps give the
classes present in the frame, most pixels or instances first), at most ``max_rows`` of them and
a "+N more" row, so a 150-class model does not cover the frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgefuse._cv import cv2

PANEL_ALPHA = 0.6
MAX_ROWS = 10


def draw_legend(image: np.ndarray, entries: Sequence[tuple[str, Sequence[int]]], *,
                max_rows: int = MAX_ROWS) -> np.ndarray:
    """``image`` (BGR uint8, drawn on in place and returned) with a legend of (name, BGR colour)
    entries in the top-left corner; nothing is drawn for no entries."""
    if not entries:
        return image
    shown = list(entries[:max_rows])
    rows: list[tuple[str, Sequence[int] | None]] = list(shown)
    if len(entries) > max_rows:
        rows.append((f"+{len(entries) - max_rows} more", None))
    height, width = image.shape[:2]
    thickness = max(round((height + width) / 2 * 0.002), 1)
    scale = max(thickness / 2.5, 0.35)
    (_, text_h), base = cv2().getTextSize("Ag", 0, scale, thickness)
    row_h = text_h + base + 4
    swatch = text_h + base
    margin = 4
    text_w = max(cv2().getTextSize(name, 0, scale, thickness)[0][0] for name, _ in rows)
    panel_w = min(margin * 3 + swatch + text_w, width)
    panel_h = min(margin * 2 + row_h * len(rows), height)
    region = image[:panel_h, :panel_w]
    region[:] = (region * (1 - PANEL_ALPHA)).astype(np.uint8)
    for index, (name, colour) in enumerate(rows):
        top = margin + index * row_h
        if colour is not None:
            cv2().rectangle(image, (margin, top), (margin + swatch, top + swatch),
                            tuple(int(c) for c in colour), -1)
            cv2().rectangle(image, (margin, top), (margin + swatch, top + swatch),
                            (255, 255, 255), 1)
        cv2().putText(image, name, (margin * 2 + swatch, top + text_h), 0, scale,
                      (255, 255, 255), thickness, cv2().LINE_AA)
    return image
