"""Text on frames: one style per frame size, and a tag (text on a filled box) drawn at a rectangle.

Why the scale comes from the frame: OpenCV's font scale is in pixels of a 22-pixel-high glyph,
so a fixed scale is unreadable on a 1080p frame shown on a phone and covers half of a 320x240
frame. supervision scales its text with the frame's shorter side
(``calculate_optimal_text_scale``: ``min(w, h) * 1e-3``); the same here, with a floor where
OpenCV's Hershey glyphs stop being legible (about 9 pixels high) and one more pixel of stroke
from 720p on. Every label, legend and panel of a frame uses the one style, so they line up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from edgefuse._cv import cv2

Rect = tuple[int, int, int, int]  # x1, y1, x2, y2: pixels x1..x2-1, y1..y2-1
FONT = 0  # cv2.FONT_HERSHEY_SIMPLEX
MIN_SCALE = 0.4
SCALE_PER_PIXEL = 1 / 1100  # of the frame's shorter side: 0.65 at 720p, 0.98 at 1080p


@dataclasses.dataclass(frozen=True)
class TextStyle:
    """Font scale, stroke and padding of the tags drawn on one frame size."""

    scale: float
    thickness: int
    pad: int

    @classmethod
    def for_frame(cls, height: int, width: int) -> TextStyle:
        scale = max(min(height, width) * SCALE_PER_PIXEL, MIN_SCALE)
        return cls(round(scale, 3), 1 if scale < 0.6 else 2, max(round(scale * 4), 2))

    def size(self, text: str) -> tuple[int, int]:
        """(width, height) of ``text`` on its tag, padding included."""
        (width, height), base = cv2().getTextSize(text, FONT, self.scale, self.thickness)
        return width + 2 * self.pad, height + base + 2 * self.pad

    def draw(self, image: np.ndarray, text: str, rect: Rect, background: Sequence[int]) -> None:
        """``text`` on a box of ``background`` (BGR) filling ``rect``, in place."""
        x1, y1, x2, y2 = rect
        cv2().rectangle(image, (x1, y1), (x2 - 1, y2 - 1), tuple(int(c) for c in background), -1)
        self.write(image, text, (x1, y1), text_colour(background))

    def write(self, image: np.ndarray, text: str, corner: tuple[int, int],
              colour: Sequence[int]) -> None:
        """``text`` with no box, its tag's top-left corner at ``corner``, in place."""
        (_, height), _ = cv2().getTextSize(text, FONT, self.scale, self.thickness)
        cv2().putText(image, text, (corner[0] + self.pad, corner[1] + self.pad + height), FONT,
                      self.scale, tuple(int(c) for c in colour), self.thickness, cv2().LINE_AA)


def text_colour(background: Sequence[int]) -> tuple[int, int, int]:
    """White on dark label backgrounds, black on light ones (BGR luma above 160)."""
    blue, green, red = (int(c) for c in background)
    return (0, 0, 0) if 0.114 * blue + 0.587 * green + 0.299 * red > 160 else (255, 255, 255)


def line_width(height: int, width: int) -> int:
    """Box and outline stroke for a frame size: 2 px at 320x240, 3 at 720p, 4 at 1080p."""
    return max(round((height + width) / 2 * 0.003), 2)
