"""Class colours: a distinct overlay palette, Pascal VOC's bit-interleaved colour map, Cityscapes'
19 train ids, or a list.

Why ``distinct`` is the overlays' default: a blend is only readable where the class colour does
not look like the object under it. VOC paints class 1 dark red, 2 green, 3 olive, 4 navy,
the colours of the objects themselves in synthetic scenes (the shapes models' red circles, blue
squares, ...) and of much of the world's signage, so a red object under a dark-red blend looks
unpainted. ``distinct`` starts with white and six saturated colours at hues between the six
primary and secondary ones (spring green, orange, violet, azure, chartreuse, rose), so no colour
is an object's own, and orders them so that each shapes class, counted from 0 (instances) or
from 1 (class maps with the background at 0), is painted at least 85 degrees of hue away from
its own objects; then come peach, dark and light tones that differ in lightness from saturated
objects. The outline and the legend (``overlay``, ``legend``) name the class in any palette.

Why VOC and Cityscapes remain: they are what segmentation users compare against (VainF
``voc_cmap``, rknn ``create_pascal_label_colormap`` and OpenVINO's ``pascal_voc_21cl_colors.txt``
agree: 0 black, 1 (128, 0, 0), 2 (0, 128, 0), 3 (128, 128, 0), 4 (0, 0, 128), ...; Cityscapes' road
(128, 64, 128) ... bicycle (119, 11, 32)). Detection boxes use Ultralytics' 20-colour cycle so
screenshots look the same. Palettes are RGB uint8 [N, 3]; ``bgr`` converts for OpenCV drawing.

Why ``SceneAware`` moves colours the scene is full of to the end: a blue box on a blue sky, or a
green label over a lawn, is as unreadable as a blend in an object's own colour. The first frame
that shows a scene (not a flat one, such as the apps' grey rehearsal frame) is measured once:
every palette colour covering more than ``CROWDED`` of it (CIELAB distance under ``NEAR``) goes
behind the others, most present last; the rest keep their order. The choice then holds for the
whole run, so a class never changes colour from one frame to the next.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.errors import InputError, Ref

CITYSCAPES = (
    (128, 64, 128), (244, 35, 232), (70, 70, 70), (102, 102, 156), (190, 153, 153),
    (153, 153, 153), (250, 170, 30), (220, 220, 0), (107, 142, 35), (152, 251, 152),
    (70, 130, 180), (220, 20, 60), (255, 0, 0), (0, 0, 142), (0, 0, 70), (0, 60, 100),
    (0, 80, 100), (0, 0, 230), (119, 11, 32),
)
# ultralytics/utils/plotting.py Colors
BOXES_HEX = (
    "FF3838", "FF9D97", "FF701F", "FFB21D", "CFD231", "48F90A", "92CC17", "3DDB86", "1A9334",
    "00D4BB", "2C99A8", "00C2FF", "344593", "6473FF", "0018EC", "8438FF", "520085", "CB38FF",
    "FF95C8", "FF37C7",
)
DISTINCT = (
    (255, 255, 255), (0, 255, 110), (255, 120, 0), (150, 60, 255), (0, 140, 255), (150, 255, 0),
    (255, 60, 170), (255, 200, 150), (128, 0, 64), (0, 64, 128), (64, 128, 0), (255, 255, 160),
    (160, 255, 255), (255, 160, 255), (96, 48, 0), (0, 96, 96), (96, 0, 160), (200, 200, 200),
    (96, 96, 96), (255, 170, 100), (100, 170, 255),
)
NAMES = ("distinct", "voc", "cityscapes", "boxes")
NEAR = 25.0  # CIELAB distance under which a pixel "has" a palette colour
CROWDED = 0.05  # the share of a frame's pixels above which a colour counts as the scene's
FLAT = 4.0  # a frame whose pixels' standard deviation is under this shows no scene
SAMPLE = 96  # frames are measured at about this many pixels on their longer side


def voc(count: int = 256) -> np.ndarray:
    """The Pascal VOC colour map: bits of the class id spread over R, G, B, high bits first."""
    ids = np.arange(count)
    colours = np.zeros((count, 3), dtype=np.int64)
    for bit in range(8):
        for channel in range(3):
            colours[:, channel] |= ((ids >> (3 * bit + channel)) & 1) << (7 - bit)
    return colours.astype(np.uint8)


def cityscapes() -> np.ndarray:
    return np.array(CITYSCAPES, dtype=np.uint8)


def distinct() -> np.ndarray:
    return np.array(DISTINCT, dtype=np.uint8)


def boxes() -> np.ndarray:
    return np.array([[int(h[i:i + 2], 16) for i in (0, 2, 4)] for h in BOXES_HEX], np.uint8)


def palette(spec: str | Sequence[Any], count: int | None = None) -> np.ndarray:
    """A palette by name (``distinct``, ``voc``, ``cityscapes``, ``boxes``) or from a list.

    Colours in a list are [r, g, b] or "#rrggbb". With ``count``, the palette is cycled (or cut)
    to exactly ``count`` colours, so every class id has one.
    """
    if isinstance(spec, str):
        if spec not in NAMES:
            raise InputError(f"unknown palette '{spec}'",
                             hint=f"one of {', '.join(NAMES)}, or a list of [r, g, b] colours",
                             reference=Ref.BAD_PALETTE)
        colours = {"voc": lambda: voc(max(count or 256, 1)), "cityscapes": cityscapes,
                   "boxes": boxes, "distinct": distinct}[spec]()
    else:
        colours = np.array([_colour(c) for c in spec], dtype=np.uint8).reshape(-1, 3)
        if len(colours) == 0:
            raise InputError("the palette list is empty", reference=Ref.BAD_PALETTE)
    if count is not None:
        colours = colours[np.arange(count) % len(colours)]
    return colours


def bgr(colours: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(colours[:, ::-1])


def _colour(value: Any) -> tuple[int, int, int]:
    if isinstance(value, str) and len(value.lstrip("#")) == 6:
        text = value.lstrip("#")
        try:
            return tuple(int(text[i:i + 2], 16) for i in (0, 2, 4))  # type: ignore[return-value]
        except ValueError:
            pass
    elif (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 3
          and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255
                  for v in value)):
        return tuple(value)  # type: ignore[return-value]
    raise InputError(f"bad palette colour {value!r}", hint="use [r, g, b] (0..255) or '#rrggbb'",
                     reference=Ref.BAD_PALETTE)


def presence(colours: np.ndarray, image: np.ndarray) -> np.ndarray:
    """For each RGB colour of ``colours``, the share of the BGR ``image``'s pixels that look like
    it (CIELAB distance under ``NEAR``, measured on a copy shrunk to ``SAMPLE`` pixels)."""
    height, width = image.shape[:2]
    step = max(max(height, width) // SAMPLE, 1)
    pixels = image[::step, ::step].reshape(-1, 1, 3).astype(np.float32) / 255
    scene = cv2().cvtColor(pixels, cv2().COLOR_BGR2Lab).reshape(-1, 3)
    ours = cv2().cvtColor(colours[:, ::-1].reshape(-1, 1, 3).astype(np.float32) / 255,
                          cv2().COLOR_BGR2Lab).reshape(-1, 3)
    near = np.linalg.norm(scene[np.newaxis] - ours[:, np.newaxis], axis=2) < NEAR
    return near.mean(axis=1)


def avoiding(colours: np.ndarray, image: np.ndarray) -> np.ndarray:
    """``colours`` (RGB) with those covering more than ``CROWDED`` of ``image`` moved to the end,
    the most present last; the others keep their order."""
    shares = presence(colours, image)
    shares = np.where(shares > CROWDED, shares, 0.0)
    return colours[np.argsort(shares, kind="stable")]


class SceneAware:
    """A palette whose order is fixed by the first frame that shows a scene (``avoiding``).

    ``colours(image, count)`` gives BGR [count, 3] for drawing on ``image``; before a scene was
    seen it gives the palette's own order. Thread-safe: the streams of a run share one."""

    def __init__(self, colours: np.ndarray) -> None:
        self._base = colours
        self._chosen: np.ndarray | None = None
        self._lock = threading.Lock()

    def colours(self, image: np.ndarray | None, count: int) -> np.ndarray:
        with self._lock:
            if self._chosen is None and image is not None and float(image.std()) >= FLAT:
                self._chosen = avoiding(self._base, image)
            chosen = self._base if self._chosen is None else self._chosen
        return bgr(chosen[np.arange(max(count, 1)) % len(chosen)])
