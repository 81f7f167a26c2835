"""Where each label goes: inside the frame, off every label placed before it and off the panels.

Why a search over candidate spots rather than supervision's spreading: supervision's
``LabelAnnotator(smart_position=True)`` pushes overlapping label boxes apart along their centre
differences for up to 100 rounds (``spread_out_boxes``) and clips them to the frame afterwards,
so a crowded frame can end with labels still overlapping, or pushed back onto each other by the
clip. Here each label tries the spots a reader expects, in order (above its box, left-aligned;
inside its top edge; below it; above, right-aligned; inside its bottom edge), each clamped into
the frame, and takes the first that overlaps nothing placed so far; when all are taken it takes
the free spot nearest the first one on a grid around it (steps of half a label's height and a
quarter of its width, ``SEARCH_ROWS`` x ``SEARCH_COLUMNS`` each way: a dozen label heights up
and down, three label widths left and right). A frame so covered in labels that none of those is
free leaves that object unlabelled (its box is still drawn): an overlapping label is unreadable
and makes the one under it unreadable too, and one placed anywhere free in the frame no longer
says which box it names. The candidates are checked against the labels near them at once (one
[candidates, labels] array); the wide search runs only for a label whose usual spots are taken.
Labels are placed best score first, so the surest objects keep the spots nearest their boxes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from edgefuse.vision.draw.text import Rect

SEARCH_ROWS = 24  # steps of half a label's height tried above and below its first spot
SEARCH_COLUMNS = 12  # steps of a quarter of its width tried left and right of it


class LabelPlacer:
    """Rectangles for labels in a ``width`` x ``height`` frame; ``taken`` are kept clear."""

    def __init__(self, width: int, height: int, taken: Iterable[Rect] = ()) -> None:
        self.width, self.height = width, height
        self._taken = np.zeros((0, 4), np.int64)
        for rect in taken:
            self.take(rect)

    @property
    def taken(self) -> list[Rect]:
        return [tuple(int(v) for v in row) for row in self._taken]  # type: ignore[misc]

    def take(self, rect: Rect) -> None:
        """Keep ``rect`` clear of later labels (a panel, a legend, a label drawn elsewhere)."""
        self._taken = np.vstack([self._taken, np.asarray(rect, np.int64)[np.newaxis]])

    def place(self, size: tuple[int, int], box: Iterable[float]) -> Rect | None:
        """A ``size`` (width, height) label's rectangle for the object ``box`` (x1, y1, x2, y2),
        taken from then on; None when no spot of the frame is free."""
        width, height = size
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        preferred = np.array([(x1, y1 - height), (x1, y1), (x1, y2), (x2 - width, y1 - height),
                              (x1, y2 - height)], np.int64)
        chosen = self._first_free(preferred, width, height)
        if chosen is None:  # the usual spots are taken: the nearest free one around them
            rows = np.arange(-SEARCH_ROWS, SEARCH_ROWS + 1) * max(height // 2, 1)
            columns = np.arange(-SEARCH_COLUMNS, SEARCH_COLUMNS + 1) * max(width // 4, 1)
            grid = np.stack(np.meshgrid(columns, rows), axis=-1).reshape(-1, 2)
            grid = grid[np.argsort(np.hypot(*grid.T), kind="stable")] + (x1, y1 - height)
            chosen = self._first_free(grid, width, height)
        if chosen is not None:
            self.take(chosen)
        return chosen

    def _first_free(self, corners: np.ndarray, width: int, height: int) -> Rect | None:
        """The first of the labels with top-left ``corners`` (moved inside the frame) that
        overlaps nothing taken."""
        corners = self._clamp(corners, width, height)
        rects = np.concatenate([corners, corners + (width, height)], axis=1)
        rects[:, 2] = np.minimum(rects[:, 2], self.width)
        rects[:, 3] = np.minimum(rects[:, 3], self.height)
        free = np.flatnonzero(self._overlap(rects) == 0)
        return tuple(int(v) for v in rects[free[0]]) if len(free) else None  # type: ignore

    def _clamp(self, corners: np.ndarray, width: int, height: int) -> np.ndarray:
        """Top-left corners moved so that their labels lie inside the frame."""
        low = np.zeros(2, np.int64)
        high = np.maximum(np.array([self.width - width, self.height - height]), 0)
        return np.clip(corners, low, high)

    def _overlap(self, rects: np.ndarray) -> np.ndarray:
        """Per rectangle [N, 4], the pixels of it the rectangles taken cover (summed over them);
        only the taken ones that reach the candidates' span are compared."""
        taken = self._taken
        if len(taken):
            near = ((taken[:, 0] < rects[:, 2].max()) & (taken[:, 2] > rects[:, 0].min())
                    & (taken[:, 1] < rects[:, 3].max()) & (taken[:, 3] > rects[:, 1].min()))
            taken = taken[near]
        if not len(taken):
            return np.zeros(len(rects), np.int64)
        taken = taken[np.newaxis]
        rects = rects[:, np.newaxis]
        across = np.minimum(taken[..., 2], rects[..., 2]) - np.maximum(taken[..., 0],
                                                                       rects[..., 0])
        down = np.minimum(taken[..., 3], rects[..., 3]) - np.maximum(taken[..., 1], rects[..., 1])
        return (np.clip(across, 0, None) * np.clip(down, 0, None)).sum(axis=1)


def overlaps(first: Rect, second: Rect) -> bool:
    """Whether two rectangles share a pixel (touching edges do not)."""
    return (first[0] < second[2] and second[0] < first[2]
            and first[1] < second[3] and second[1] < first[3])
