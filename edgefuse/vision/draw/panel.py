"""A panel in a corner of the frame: rows of text, each with an optional colour swatch, on a dark
background blended over the scene.

Why one panel for the legend and the counts: both are read at a glance at a fixed place, both
must stay readable over any scene (light text on a darkened box, not text straight on the
frame, where a count on a counting line collides with the boxes crossing it), and the labels of
the objects must be kept off both (``rect`` is known before anything is drawn, so the label
placer can keep it clear). The legend sits top-left, the counts top-right.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgefuse.vision.draw.text import Rect, TextStyle

PANEL_ALPHA = 0.6  # how much the panel darkens the scene under it
Row = tuple[str, "Sequence[int] | None"]  # text, BGR swatch colour (None: no swatch)


def panel_rect(shape: Sequence[int], rows: Sequence[Row], style: TextStyle,
               corner: str = "top-left") -> Rect | None:
    """Where the panel of ``rows`` goes on a frame of ``shape``, in its ``corner`` ("top-left"
    or "top-right"), cut to the frame; None for no rows."""
    if not rows:
        return None
    height, width = shape[:2]
    row_w, row_h = _row_size(rows, style)
    panel_w, panel_h = min(row_w, width), min(row_h * len(rows) + 2 * style.pad, height)
    left = 0 if corner == "top-left" else width - panel_w
    return left, 0, left + panel_w, panel_h


def draw_panel(image: np.ndarray, rows: Sequence[Row], style: TextStyle, rect: Rect) -> None:
    """The panel of ``rows`` at ``rect`` (from ``panel_rect``), in place."""
    x1, y1, x2, y2 = rect
    region = image[y1:y2, x1:x2]
    region[:] = (region * (1 - PANEL_ALPHA)).astype(np.uint8)
    _, row_h = _row_size(rows, style)
    swatch = row_h - 2 * style.pad
    with_swatch = any(colour is not None for _, colour in rows)
    for index, (text, colour) in enumerate(rows):
        top = y1 + style.pad + index * row_h
        if top + row_h > y2:
            break
        left = x1 + style.pad
        if colour is not None:
            _swatch(region, left - x1, top - y1 + style.pad, swatch, colour)
        if with_swatch:
            left += swatch + style.pad
        style.write(image, text, (left, top), (255, 255, 255))


def _swatch(region: np.ndarray, left: int, top: int, size: int, colour: Sequence[int]) -> None:
    region[top:top + size, left:left + size] = 255
    region[top + 1:top + size - 1, left + 1:left + size - 1] = [int(c) for c in colour]


def _row_size(rows: Sequence[Row], style: TextStyle) -> tuple[int, int]:
    """The widest row's width (swatch, text, padding) and the height of a row."""
    sizes = [style.size(text) for text, _ in rows]
    row_h = max(h for _, h in sizes)
    swatch = row_h - 2 * style.pad + style.pad if any(c is not None for _, c in rows) else 0
    return max(w for w, _ in sizes) + swatch + 2 * style.pad, row_h
