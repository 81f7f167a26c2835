"""Procedural scenes of coloured shapes, with boxes and masks taken from the same scene.

Why: the camera apps need default models that detect and segment something real, no trained
weights or data sets can be downloaded here, and random weights draw nonsense. So the default
models are trained on scenes made up on the spot: random scenes are an endless, labelled data set.

How the labels stay true: one list of objects (class, centre, size, aspect, angle, colour) is drawn
in order, later objects over earlier ones, into an instance map; the image, the class mask and the
boxes are all read off that map. A box is the bounding box of its object's visible pixels
(x1, y1 inclusive, x2, y2 exclusive, pixel edges), so the box and the mask cannot disagree. An
object whose visible area is under ``MIN_VISIBLE_FRACTION`` of its full area (hidden behind others
or cut by the border) or under ``min_visible_pixels`` gets no box; its visible pixels keep their
class in the mask, because they do show that class. Single scenes are placed so that no object
hides more than half of another, which keeps such fragments rare; in clips they occur while one
object passes behind another.

Each class has its own shape and its own hue; hue, saturation, brightness, shading, size, aspect
and rotation vary per object, backgrounds are textured (smooth noise, stripes, checkers, clutter)
or gradients, and scenes are blurred and noisy by random amounts. Everything is a function of
(seed, index) through numpy Generators: the global RNGs are neither read nor advanced.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np

from edgefuse._deps import require
from edgefuse.errors import InputError, Ref

CLASSES = ("circle", "square", "triangle", "star", "cross", "ring")
# OpenCV hues (0..179), one per class: red, blue, green, yellow, magenta, cyan.
CLASS_HUES = (0, 120, 60, 28, 150, 90)
HUE_JITTER = 8  # +- OpenCV hue units (16 degrees)
MIN_VISIBLE_FRACTION = 0.3
PLACEMENT_KEEP_FRACTION = 0.5  # single scenes: no object may hide more than half of another
RADIUS_RANGE = (0.045, 0.19)  # object radius as a fraction of the shorter image side (log-uniform)
CLIP_SPEED_RANGE = (0.12, 0.4)  # clip objects move this many shorter sides per second
CLIP_SPIN = 90.0  # degrees per second, at most
_STREAM_SCENE, _STREAM_CLIP = 0, 1
# A few seconds of clip 21 of seed 0 at 320x240, rendered by ``python -m training.shapes --task
# clip`` (recorded in edgefuse/models/weights/shapes.json): the camera apps' default input.
SAMPLE_CLIP = Path(__file__).with_name("data") / "shapes_clip.mp4"


@dataclasses.dataclass(frozen=True)
class Scene:
    """One rendered scene: the image and its labels.

    ``boxes`` [K, 4] float32 xyxy pixel edges of each labelled object's visible pixels,
    ``classes`` [K] int64 indices into ``CLASSES``, ``mask`` [H, W] uint8 (0 background, class + 1),
    ``instances`` [H, W] int32 (0 none, k + 1 for ``boxes[k]``), ``ids`` [K] int64 the object's
    identity (its draw order; stable across the frames of a clip).
    """

    image: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    mask: np.ndarray
    instances: np.ndarray
    ids: np.ndarray


@dataclasses.dataclass
class _Object:
    cls: int
    x: float
    y: float
    radius: float
    aspect: float  # x stretch; y is divided by it, so the area does not change
    angle: float  # degrees
    color: np.ndarray  # BGR float32 [3]
    shade: float  # brightness change across one radius
    shade_angle: float  # radians


@dataclasses.dataclass(frozen=True)
class _Look:
    blur: float  # Gaussian sigma in pixels; 0 is none
    noise: float  # Gaussian pixel noise sigma in grey levels


class SceneGenerator:
    """Scenes and clips of ``size`` = (height, width), a function of (``seed``, index) only."""

    def __init__(
        self,
        seed: int = 0,
        size: tuple[int, int] = (256, 256),
        *,
        max_objects: int = 8,
        min_visible_pixels: int | None = None,
    ) -> None:
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InputError(
                f"scene seed must be a non-negative integer, got {seed!r}",
                hint="pass seed=0 or any other integer >= 0",
                reference=Ref.BAD_ARGUMENT,
            )
        height, width = (int(side) for side in size)
        if min(height, width) < 32:
            raise InputError(
                f"scene size {height}x{width} is too small",
                hint="give (height, width) of at least 32 pixels each",
                reference=Ref.BAD_ARGUMENT,
            )
        self.seed = int(seed)
        self.size = (height, width)
        self.max_objects = max_objects
        short = min(height, width)
        self.min_visible_pixels = (
            max(16, round(0.0015 * short * short))
            if min_visible_pixels is None
            else min_visible_pixels
        )

    def scene(self, index: int) -> Scene:
        """Scene number ``index``: the same (seed, index, size) gives the same scene."""
        cv2 = _cv2()
        rng = self._rng(index, _STREAM_SCENE)
        background = _background(rng, self.size, cv2)
        objects = self._place(rng, cv2)
        look = _Look(
            blur=float(rng.uniform(0.0, 1.2)) * min(self.size) / 256,
            noise=float(rng.uniform(0.0, 6.0)),
        )
        return self._render(background, objects, look, rng, cv2)

    def clip(self, index: int = 0, frames: int = 90, fps: float = 30.0) -> Iterator[Scene]:
        """Clip number ``index``: objects move, bounce off the borders and spin, frame by frame.

        The background, the objects and their draw order stay; an object that passes behind
        another loses its box while it is mostly hidden.
        """
        if frames < 1 or fps <= 0:
            raise InputError(
                f"a clip needs frames >= 1 and fps > 0, got frames={frames}, fps={fps}",
                hint="for example clip(frames=90, fps=30)",
                reference=Ref.BAD_ARGUMENT,
            )
        cv2 = _cv2()
        rng = self._rng(index, _STREAM_CLIP)
        background = _background(rng, self.size, cv2)
        objects = self._place(rng, cv2, count=int(rng.integers(4, 9)))
        short = min(self.size)
        velocities = []
        for _ in objects:
            speed = short * rng.uniform(*CLIP_SPEED_RANGE)
            heading = rng.uniform(0.0, 2 * math.pi)
            velocities.append(
                (speed * math.cos(heading), speed * math.sin(heading),
                 rng.uniform(-CLIP_SPIN, CLIP_SPIN))
            )
        look = _Look(blur=float(rng.uniform(0.0, 0.8)) * short / 256, noise=1.5)
        return self._frames(background, objects, velocities, look, rng, frames, 1.0 / fps, cv2)

    def _frames(self, background, objects, velocities, look, rng, frames, dt, cv2):
        height, width = self.size
        for _ in range(frames):
            yield self._render(background, objects, look, rng, cv2)
            for obj, (vx, vy, spin) in zip(objects, velocities, strict=True):
                obj.x, obj.y, obj.angle = obj.x + vx * dt, obj.y + vy * dt, obj.angle + spin * dt
            velocities = [_bounced(o, v, width, height) for o, v in zip(objects, velocities,
                                                                          strict=True)]

    def _rng(self, index: int, stream: int) -> np.random.Generator:
        if index < 0:
            raise InputError(
                f"scene index must be >= 0, got {index}",
                hint="scenes are numbered 0, 1, 2, ...",
                reference=Ref.BAD_ARGUMENT,
            )
        return np.random.default_rng(np.random.SeedSequence([self.seed, int(index), stream]))

    def _place(self, rng: np.random.Generator, cv2: ModuleType, count: int | None = None):
        """Objects in draw order, each hiding at most half of any earlier one."""
        if count is None:
            count = 0 if rng.random() < 0.03 else int(rng.integers(1, self.max_objects + 1))
        instances = np.zeros(self.size, dtype=np.int32)
        objects: list[_Object] = []
        for _ in range(count):
            for _attempt in range(12):
                obj = self._random_object(rng, cv2)
                mask = _object_mask(obj, self.size, cv2)
                if mask.sum() < self.min_visible_pixels:
                    continue
                visible = np.bincount(instances.ravel(), minlength=len(objects) + 1)[1:]
                hidden = np.bincount(instances[mask], minlength=len(objects) + 1)[1:]
                areas = np.array([_area(o) for o in objects])
                if np.all(visible - hidden >= PLACEMENT_KEEP_FRACTION * areas):
                    instances[mask] = len(objects) + 1
                    objects.append(obj)
                    break
        return objects

    def _random_object(self, rng: np.random.Generator, cv2: ModuleType) -> _Object:
        height, width = self.size
        short = min(height, width)
        cls = int(rng.integers(len(CLASSES)))
        radius = short * math.exp(rng.uniform(*np.log(RADIUS_RANGE)))
        inset = 0.3 * radius
        hue = (CLASS_HUES[cls] + int(rng.integers(-HUE_JITTER, HUE_JITTER + 1))) % 180
        hsv = np.array([[[hue, rng.uniform(150, 255), rng.uniform(130, 255)]]], dtype=np.uint8)
        return _Object(
            cls=cls,
            x=float(rng.uniform(inset, width - inset)),
            y=float(rng.uniform(inset, height - inset)),
            radius=radius,
            aspect=float(math.exp(rng.uniform(math.log(0.7), math.log(1.4)))),
            angle=float(rng.uniform(0.0, 360.0)),
            color=cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32),
            shade=float(rng.uniform(-0.3, 0.3)),
            shade_angle=float(rng.uniform(0.0, 2 * math.pi)),
        )

    def _render(
        self,
        background: np.ndarray,
        objects: list[_Object],
        look: _Look,
        rng: np.random.Generator,
        cv2: ModuleType,
    ) -> Scene:
        image = background.copy()
        instances = np.zeros(self.size, dtype=np.int32)
        for number, obj in enumerate(objects, start=1):
            mask = _object_mask(obj, self.size, cv2)
            _paint(image, mask, obj)
            instances[mask] = number
        if look.blur > 0.3:
            image = cv2.GaussianBlur(image, (0, 0), look.blur)
        if look.noise > 0:
            image = image + look.noise * rng.standard_normal(image.shape, dtype=np.float32)
        image = np.clip(np.rint(image), 0, 255).astype(np.uint8)
        return self._labels(image, instances, objects)

    def _labels(self, image: np.ndarray, instances: np.ndarray, objects: list[_Object]) -> Scene:
        classes_of = np.array([0] + [obj.cls + 1 for obj in objects], dtype=np.uint8)
        mask = classes_of[instances]
        visible = np.bincount(instances.ravel(), minlength=len(objects) + 1)[1:]
        boxes, classes, ids = [], [], []
        labelled = np.zeros(self.size, dtype=np.int32)
        for k, obj in enumerate(objects):
            if visible[k] < max(self.min_visible_pixels, MIN_VISIBLE_FRACTION * _area(obj)):
                continue
            ys, xs = np.nonzero(instances == k + 1)
            boxes.append((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
            classes.append(obj.cls)
            ids.append(k)
            labelled[instances == k + 1] = len(boxes)
        return Scene(
            image=image,
            boxes=np.array(boxes, dtype=np.float32).reshape(-1, 4),
            classes=np.array(classes, dtype=np.int64),
            mask=mask,
            instances=labelled,
            ids=np.array(ids, dtype=np.int64),
        )


def _cv2() -> ModuleType:
    return require("cv2", extra="vision", purpose="the scene generator")


def _bounced(obj: _Object, velocity, width: int, height: int):
    vx, vy, spin = velocity
    margin = 0.5 * obj.radius
    if (obj.x < margin and vx < 0) or (obj.x > width - margin and vx > 0):
        vx = -vx
    if (obj.y < margin and vy < 0) or (obj.y > height - margin and vy > 0):
        vy = -vy
    return (vx, vy, spin)


# --- shapes -------------------------------------------------------------------------------------


def _regular(points: int, radius: float, start: float = 90.0) -> np.ndarray:
    angles = np.deg2rad(start + 360.0 * np.arange(points) / points)
    return radius * np.stack([np.cos(angles), -np.sin(angles)], axis=1)


def _star(points: int, outer: float, inner: float) -> np.ndarray:
    angles = np.deg2rad(90.0 + 180.0 * np.arange(2 * points) / points)
    radii = np.where(np.arange(2 * points) % 2 == 0, outer, inner)
    return np.stack([radii * np.cos(angles), -radii * np.sin(angles)], axis=1)


def _cross(arm: float, half_width: float) -> np.ndarray:
    a, w = arm, half_width
    return np.array(
        [(-w, -a), (w, -a), (w, -w), (a, -w), (a, w), (w, w), (w, a), (-w, a), (-w, w), (-a, w),
         (-a, -w), (-w, -w)]
    )


@functools.cache
def _unit_shape(cls: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(outline, hole or None) of a class at radius 1, areas of roughly pi."""
    name = CLASSES[cls]
    if name == "circle":
        return _regular(64, 1.0), None
    if name == "square":
        return _regular(4, 1.2, start=45.0), None
    if name == "triangle":
        return _regular(3, 1.35), None
    if name == "star":
        return _star(5, 1.4, 0.6), None
    if name == "cross":
        return _cross(1.25, 0.42), None
    return _regular(64, 1.1), _regular(64, 0.6)  # ring


@functools.cache
def _unit_area(cls: int) -> float:
    outline, hole = _unit_shape(cls)
    return _polygon_area(outline) - (0.0 if hole is None else _polygon_area(hole))


def _polygon_area(points: np.ndarray) -> float:
    x, y = points[:, 0], points[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _area(obj: _Object) -> float:
    """Full area in pixels (inside and outside the image): the stretch keeps areas."""
    return _unit_area(obj.cls) * obj.radius**2


def _place_points(points: np.ndarray, obj: _Object) -> np.ndarray:
    stretched = points * np.array([obj.aspect, 1.0 / obj.aspect]) * obj.radius
    theta = math.radians(obj.angle)
    rotation = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    return stretched @ rotation.T + np.array([obj.x, obj.y])


_SHIFT = 4  # fillPoly's fractional bits: vertices at 1/16 pixel


def _object_mask(obj: _Object, size: tuple[int, int], cv2: ModuleType) -> np.ndarray:
    """Boolean [H, W] of the pixels whose centres the shape covers."""
    outline, hole = _unit_shape(obj.cls)
    canvas = np.zeros(size, dtype=np.uint8)
    # Pixel (i, j) has its centre at (j + 0.5, i + 0.5); fillPoly samples at integer points.
    for points, value in ((outline, 1), (hole, 0)):
        if points is None:
            continue
        placed = _place_points(points, obj) - 0.5
        fixed = np.rint(placed * (1 << _SHIFT)).astype(np.int32)
        cv2.fillPoly(canvas, [fixed], value, lineType=cv2.LINE_8, shift=_SHIFT)
    return canvas.astype(bool)


def _paint(image: np.ndarray, mask: np.ndarray, obj: _Object) -> None:
    """Fill ``mask`` with the object's colour, shaded linearly across it."""
    ys, xs = np.nonzero(mask)
    if ys.size == 0:
        return
    along = ((xs + 0.5 - obj.x) * math.cos(obj.shade_angle)
             + (ys + 0.5 - obj.y) * math.sin(obj.shade_angle)) / obj.radius
    gain = np.clip(1.0 + obj.shade * along, 0.4, 1.6).astype(np.float32)
    image[ys, xs] = obj.color[None, :] * gain[:, None]


# --- backgrounds --------------------------------------------------------------------------------


def _dull_color(rng: np.random.Generator, cv2: ModuleType) -> np.ndarray:
    """A background colour: any hue, low saturation, so the objects' colours stand out."""
    hsv = np.array(
        [[[rng.integers(0, 180), rng.uniform(0, 130), rng.uniform(30, 235)]]], dtype=np.uint8
    )
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float32)


def _ramp(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    """Position along a random direction, 0..1 across the image."""
    height, width = size
    theta = rng.uniform(0.0, 2 * math.pi)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    along = xs * math.cos(theta) + ys * math.sin(theta)
    return (along - along.min()) / max(float(np.ptp(along)), 1.0)


def _background(rng: np.random.Generator, size: tuple[int, int], cv2: ModuleType) -> np.ndarray:
    """Float32 [H, W, 3] BGR: a gradient, smooth noise, stripes or a checker, lit unevenly."""
    height, width = size
    short = min(size)
    first, second = _dull_color(rng, cv2), _dull_color(rng, cv2)
    kind = int(rng.integers(4))
    if kind == 0:  # linear or radial gradient
        if rng.random() < 0.5:
            weight = _ramp(rng, size)
        else:
            ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
            cy, cx = rng.uniform(0, height), rng.uniform(0, width)
            weight = np.hypot(ys - cy, xs - cx)
            weight /= max(float(weight.max()), 1.0)
    elif kind == 1:  # smooth noise: a coarse random grid, resized with cubic interpolation
        cells = int(rng.integers(3, 12))
        grid = rng.random((cells, cells)).astype(np.float32)
        weight = np.clip(cv2.resize(grid, (width, height), interpolation=cv2.INTER_CUBIC), 0, 1)
    else:  # stripes or a checker along rotated axes
        theta = rng.uniform(0.0, math.pi)
        period = short * rng.uniform(0.04, 0.2)
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        u = (xs * math.cos(theta) + ys * math.sin(theta)) / period
        if kind == 2:
            weight = 0.5 + 0.5 * np.sin(2 * math.pi * u)
            if rng.random() < 0.5:
                weight = (weight > 0.5).astype(np.float32)
        else:
            v = (-xs * math.sin(theta) + ys * math.cos(theta)) / period
            weight = ((np.floor(u) + np.floor(v)) % 2).astype(np.float32)
    image = first + (second - first) * weight[..., None]
    light = 1.0 + rng.uniform(-0.3, 0.3) * (2 * _ramp(rng, size) - 1)
    image = image * light[..., None]
    image += rng.uniform(0.0, 8.0) * rng.standard_normal(image.shape, dtype=np.float32)
    for _ in range(int(rng.integers(0, 4))):  # clutter: thin dull lines
        start = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        end = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        color = tuple(float(c) for c in _dull_color(rng, cv2))
        cv2.line(image, start, end, color, int(rng.integers(1, 4)), cv2.LINE_AA)
    return image.astype(np.float32)
