"""Generated images of printed words, with each word's box and DB's probability target.

Why: a text detector needs labelled text images to be trained and, above all, to be calibrated and
verified on (its probability map is ~0 on noise, so a gate on random inputs measures nothing); no
data set can be downloaded here, and generated scenes are an endless labelled one.

How the labels stay true: each word is rendered alone into an ink patch (``cv2.putText``, one of
OpenCV's Hershey fonts, italic or not); its box is the tight box of that patch's ink; one affine map
(a rotation about the box centre, then a translation) carries both the ink and the box corners into
the image. Words are placed only where no earlier word is (with a margin), so a box holds one
word's ink and nothing else's. The target is DB's shrink map (Liao et al. 2020, eq. 7): each box
shrunk on every side by ``D = A (1 - r^2) / L`` (A its area, L its perimeter, r = 0.4), filled
with 1 on a map of 0.

Backgrounds are flat, gradients, smooth colour noise or soft stripes; lines, rectangles, circles
and dots are drawn under the words (edges that are not text); word colours keep a grey-level
contrast to the background under them; images are blurred and noisy by random amounts. Everything
is a function of (seed, index) through numpy Generators: the global RNGs are neither read nor
advanced.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from types import ModuleType

import numpy as np

from edgefuse._checks import integer_at_least
from edgefuse._cv import cv2 as _cv2
from edgefuse._files import atomic_output
from edgefuse.errors import InputError, Ref

WORDS = tuple("""
the of and to in is you that it was for on are as with they at be this from have or by one had
not but what all were when we there can an your which their said if do will each about how up out
them then she many some so these would other into has more her two like him see time could no
make than first been its who now people my made over did down only way find use may water long
little very after words called just where most know get through back much before go good new
write our used me man too any day same right look think also around another came come work three
must because does part even place well such here take why help put different away again off went
old number great tell men say small every found still between name should home big give air line
set own under read last never left end along while might next sound below saw something thought
both few those always show large often together asked house world going want school important
until form food keep children feet land side without boy once animal life enough took four head
above kind began almost live page got earth need far hand high year mother light country father
let night picture being study second soon story since white ever paper hard near sentence better
best across during today however sure knew try told young sun thing whole hear example heard
several change answer room sea against top turned learn point city play toward five himself
usually money seen car morning body upon family later turn move face door cut done group true
leave color red friend pretty eat front feel fact open exit sale stop push pull entrance parking
menu coffee tea bread hotel station taxi bus train ticket price total cash card street road north
south east west museum market garden bank post office police hospital pharmacy library closed
free fresh hot cold new special offer today only please thank welcome hello danger caution
""".split())
# OpenCV's Hershey fonts: SIMPLEX, PLAIN, DUPLEX, COMPLEX, TRIPLEX, COMPLEX_SMALL, SCRIPT_SIMPLEX,
# SCRIPT_COMPLEX (cv2.FONT_HERSHEY_* are 0..7); ITALIC (cv2.FONT_ITALIC) is or-ed in.
FONTS = tuple(range(8))
ITALIC = 16
SHRINK_RATIO = 0.4  # DB's r
TEXT_HEIGHT_RANGE = (0.06, 0.17)  # the ink height as a fraction of the shorter side (log-uniform)
MAX_ANGLE = 20.0  # degrees; most words are nearly level
MIN_CONTRAST = 80.0  # grey levels between a word and the mean of the background under it
PLACEMENT_TRIES = 20
DEFAULT_SIZE = (160, 160)


@dataclasses.dataclass(frozen=True)
class TextScene:
    """One generated image and its labels.

    ``image`` [H, W, 3] uint8 BGR; ``quads`` [K, 4, 2] float32 each word's ink box, corners in
    drawing order (top-left, top-right, bottom-right, bottom-left of the unrotated word), in
    OpenCV pixel coordinates (pixel centres at integers); ``words`` the K strings; ``target``
    [H, W] float32, 1 inside the shrunk boxes and 0 elsewhere (DB's probability target).
    """

    image: np.ndarray
    quads: np.ndarray
    words: tuple[str, ...]
    target: np.ndarray


def text_scene(seed: int, index: int, *, size: tuple[int, int] = DEFAULT_SIZE,
               max_words: int = 6) -> TextScene:
    """Scene ``index`` of the sequence ``seed``: 1 to ``max_words`` words (none in 1 of 20)."""
    seed = integer_at_least("seed", seed, 0)
    index = integer_at_least("index", index, 0)
    max_words = integer_at_least("max_words", max_words, 1)
    height, width = _check_size(size)
    cv2 = _cv2()
    rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
    image = _background(rng, height, width, cv2)
    _distractors(rng, image, cv2)
    count = 0 if rng.random() < 0.05 else int(rng.integers(1, max_words + 1))
    occupied = np.zeros((height, width), np.uint8)
    target = np.zeros((height, width), np.float32)
    quads, words = [], []
    for _ in range(count):
        placed = _place_word(rng, image, occupied, target, cv2)
        if placed is not None:
            quads.append(placed[0])
            words.append(placed[1])
    image = _finish(rng, image, cv2)
    quads_array = np.array(quads, np.float32).reshape(-1, 4, 2)
    return TextScene(image, quads_array, tuple(words), target)


def write_text_images(folder: str | os.PathLike[str], *, seed: int, count: int,
                      size: tuple[int, int] = DEFAULT_SIZE, start: int = 0) -> list[Path]:
    """Scenes ``start .. start + count - 1`` as PNG files ``NNNNN.png`` in ``folder`` (created):
    a folder for ``--inputs``. Each file is written whole or not at all."""
    count = integer_at_least("count", count, 1)
    start = integer_at_least("start", start, 0)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cv2 = _cv2()
    paths = []
    for index in range(start, start + count):
        path = folder / f"{index:05d}.png"
        image = text_scene(seed, index, size=size).image
        with atomic_output(path, suffix=".png") as tmp:
            if not cv2.imwrite(str(tmp), image):
                raise InputError(f"OpenCV could not write '{path}'", reference=Ref.CANNOT_WRITE)
        paths.append(path)
    return paths


def shrink_distance(width: float, height: float) -> float:
    """DB's shrink offset of a ``width`` x ``height`` box: A (1 - r^2) / L."""
    return width * height * (1.0 - SHRINK_RATIO**2) / (2.0 * (width + height))


def _check_size(size: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise InputError(f"size must be (height, width), got {size!r}", reference=Ref.BAD_ARGUMENT)
    return integer_at_least("height", size[0], 32), integer_at_least("width", size[1], 32)


def _grey(bgr: np.ndarray) -> float:
    return float(0.114 * bgr[0] + 0.587 * bgr[1] + 0.299 * bgr[2])


def _background(rng: np.random.Generator, height: int, width: int, cv2: ModuleType) -> np.ndarray:
    kind = rng.integers(4)
    first, second = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    if kind == 0:  # flat
        image = np.broadcast_to(first, (height, width, 3)).astype(np.float32)
    elif kind == 1:  # linear gradient in a random direction
        angle = rng.uniform(0, 2 * math.pi)
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        ramp = xs * math.cos(angle) + ys * math.sin(angle)
        ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1.0)
        image = first + (second - first) * ramp[..., None]
    elif kind == 2:  # smooth colour noise
        cells = rng.uniform(0, 255, (int(rng.integers(2, 8)), int(rng.integers(2, 8)), 3))
        image = cv2.resize(cells.astype(np.float32), (width, height),
                           interpolation=cv2.INTER_CUBIC)
    else:  # soft stripes
        angle, period = rng.uniform(0, math.pi), rng.uniform(8, 40)
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        wave = 0.5 + 0.5 * np.sin(2 * math.pi * (xs * math.cos(angle) + ys * math.sin(angle))
                                  / period)
        image = first + (second - first) * 0.35 * wave[..., None]
    return np.ascontiguousarray(np.clip(image, 0, 255), dtype=np.float32)  # OpenCV draws on it


def _distractors(rng: np.random.Generator, image: np.ndarray, cv2: ModuleType) -> None:
    height, width = image.shape[:2]
    for _ in range(int(rng.integers(0, 5))):
        color = tuple(float(c) for c in rng.uniform(0, 255, 3))
        kind = rng.integers(4)
        x1, x2 = (int(v) for v in rng.integers(0, width, 2))
        y1, y2 = (int(v) for v in rng.integers(0, height, 2))
        thickness = int(rng.integers(1, 4))
        if kind == 0:
            cv2.line(image, (x1, y1), (x2, y2), color, thickness, cv2.LINE_AA)
        elif kind == 1:
            cv2.rectangle(image, (x1, y1), (x2, y2), color, thickness, cv2.LINE_AA)
        elif kind == 2:
            radius = int(rng.integers(3, max(4, min(height, width) // 6)))
            cv2.circle(image, (x1, y1), radius, color, -1 if rng.random() < 0.5 else thickness,
                       cv2.LINE_AA)
        else:
            for _ in range(int(rng.integers(3, 12))):
                cx, cy = int(rng.integers(0, width)), int(rng.integers(0, height))
                cv2.circle(image, (cx, cy), int(rng.integers(1, 3)), color, -1, cv2.LINE_AA)


def _place_word(rng: np.random.Generator, image: np.ndarray, occupied: np.ndarray,
                target: np.ndarray, cv2: ModuleType) -> tuple[np.ndarray, str] | None:
    """Draw one word where nothing else is; update ``occupied`` and ``target``."""
    height, width = image.shape[:2]
    word = _random_word(rng)
    font = int(rng.choice(FONTS)) | (ITALIC if rng.random() < 0.2 else 0)
    ink_height = min(height, width) * math.exp(rng.uniform(*np.log(TEXT_HEIGHT_RANGE)))
    (unit_width, unit_height), unit_base = cv2.getTextSize(word, font, 1.0, 1)
    scale = ink_height / (unit_height + unit_base)
    scale = min(scale, 0.9 * width / unit_width)
    thickness = max(1, int(round(ink_height * rng.uniform(0.04, 0.1))))
    patch = _ink_patch(word, font, scale, thickness, cv2)
    ys, xs = np.nonzero(patch)
    if xs.size == 0:
        return None
    # The ink's box in OpenCV coordinates: pixel i spans [i - 0.5, i + 0.5].
    left, right, top, bottom = xs.min() - 0.5, xs.max() + 0.5, ys.min() - 0.5, ys.max() + 0.5
    box_w, box_h = right - left, bottom - top
    centre = ((left + right) / 2, (top + bottom) / 2)
    angle = rng.uniform(-MAX_ANGLE, MAX_ANGLE) if rng.random() < 0.4 else rng.uniform(-2, 2)
    cos, sin = abs(math.cos(math.radians(angle))), abs(math.sin(math.radians(angle)))
    extent_x, extent_y = (box_w * cos + box_h * sin) / 2 + 1, (box_w * sin + box_h * cos) / 2 + 1
    if 2 * extent_x >= width or 2 * extent_y >= height:
        return None
    margin = max(2.0, 0.3 * box_h)
    for _ in range(PLACEMENT_TRIES):
        x = rng.uniform(extent_x, width - 1 - extent_x)
        y = rng.uniform(extent_y, height - 1 - extent_y)
        matrix = cv2.getRotationMatrix2D(centre, angle, 1.0)
        matrix[:, 2] += (x - centre[0], y - centre[1])
        quad = _rect_quad(centre, box_w, box_h, matrix)
        footprint = np.zeros_like(occupied)
        _fill(footprint, _rect_quad(centre, box_w + 2 * margin, box_h + 2 * margin, matrix), cv2)
        if np.any(footprint & occupied):
            continue
        occupied |= footprint
        alpha = cv2.warpAffine(patch, matrix, (width, height), flags=cv2.INTER_LINEAR,
                               borderValue=0).astype(np.float32)[..., None] / 255.0
        inside = np.zeros_like(occupied)
        _fill(inside, quad, cv2)
        color = _text_color(rng, image[inside.astype(bool)].mean(axis=0))
        image *= 1.0 - alpha
        image += alpha * color
        shrink = shrink_distance(box_w, box_h)
        shrunk = _rect_quad(centre, max(box_w - 2 * shrink, 1.0), max(box_h - 2 * shrink, 1.0),
                            matrix)
        _fill(target, shrunk, cv2)
        return quad, word
    return None


def _random_word(rng: np.random.Generator) -> str:
    if rng.random() < 0.1:
        digits = str(int(rng.integers(0, 10 ** int(rng.integers(1, 5)))))
        return digits if rng.random() < 0.5 else f"{digits}.{int(rng.integers(0, 100)):02d}"
    word = str(rng.choice(WORDS))
    style = rng.random()
    return word.upper() if style < 0.25 else word.capitalize() if style < 0.5 else word


def _ink_patch(word: str, font: int, scale: float, thickness: int, cv2: ModuleType) -> np.ndarray:
    (text_w, text_h), base = cv2.getTextSize(word, font, scale, thickness)
    pad = 2 * thickness + 4  # italic and script glyphs lean past the advance box
    patch = np.zeros((text_h + base + 2 * pad, text_w + 2 * pad), np.uint8)
    cv2.putText(patch, word, (pad, pad + text_h), font, scale, 255, thickness, cv2.LINE_AA)
    return patch


def _rect_quad(centre: tuple[float, float], box_w: float, box_h: float,
               matrix: np.ndarray) -> np.ndarray:
    cx, cy = centre
    corners = np.array([[cx - box_w / 2, cy - box_h / 2], [cx + box_w / 2, cy - box_h / 2],
                        [cx + box_w / 2, cy + box_h / 2], [cx - box_w / 2, cy + box_h / 2]])
    return (corners @ matrix[:, :2].T + matrix[:, 2]).astype(np.float32)


def _fill(mask: np.ndarray, quad: np.ndarray, cv2: ModuleType) -> None:
    """Fill ``quad`` (OpenCV coordinates) with 1, to 1/16 of a pixel."""
    cv2.fillPoly(mask, [np.round(quad * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)


def _text_color(rng: np.random.Generator, under: np.ndarray) -> np.ndarray:
    color = rng.uniform(0, 255, 3)
    if abs(_grey(color) - _grey(under)) >= MIN_CONTRAST:
        return color.astype(np.float32)
    dark = _grey(under) > 127.5
    level = rng.uniform(0, 60) if dark else rng.uniform(195, 255)
    return np.clip(level + rng.uniform(-25, 25, 3), 0, 255).astype(np.float32)


def _finish(rng: np.random.Generator, image: np.ndarray, cv2: ModuleType) -> np.ndarray:
    if rng.random() < 0.5:
        image = cv2.GaussianBlur(image, (0, 0), float(rng.uniform(0.3, 0.9)))
    image = image + float(rng.uniform(0, 6)) * rng.standard_normal(image.shape, dtype=np.float32)
    return np.clip(np.round(image), 0, 255).astype(np.uint8)
