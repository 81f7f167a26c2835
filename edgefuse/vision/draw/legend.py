"""A legend drawn on the frame: a swatch of each class colour beside the class name.

Why on the frame and not in a side panel: a saved video or image must be readable on its own,
and a side panel would change the frame size the sinks write. The legend is a ``panel`` in the
top-left corner (its ``legend_rect`` is kept clear of the object labels), one row per class in
class order (the order does not change from frame to frame, so an entry is found where it was),
at most ``max_rows`` of them and a "+N more" row, so a 150-class model does not cover the frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgefuse.vision.draw.panel import Row, draw_panel, panel_rect
from edgefuse.vision.draw.text import Rect, TextStyle

MAX_ROWS = 10
Entry = tuple[str, Sequence[int]]


def legend_rect(shape: Sequence[int], entries: Sequence[Entry], *,
                max_rows: int = MAX_ROWS) -> Rect | None:
    """Where ``draw_legend`` puts the legend of ``entries`` on a frame of ``shape``."""
    return panel_rect(shape, _rows(entries, max_rows), TextStyle.for_frame(*shape[:2]))


def draw_legend(image: np.ndarray, entries: Sequence[Entry], *,
                max_rows: int = MAX_ROWS) -> np.ndarray:
    """``image`` (BGR uint8, drawn on in place and returned) with a legend of (name, BGR colour)
    entries, in the order given, in the top-left corner; nothing is drawn for no entries."""
    rows = _rows(entries, max_rows)
    style = TextStyle.for_frame(*image.shape[:2])
    rect = panel_rect(image.shape, rows, style)
    if rect is not None:
        draw_panel(image, rows, style, rect)
    return image


def _rows(entries: Sequence[Entry], max_rows: int) -> list[Row]:
    rows: list[Row] = list(entries[:max_rows])
    if len(entries) > max_rows:
        rows.append((f"+{len(entries) - max_rows} more", None))
    return rows
