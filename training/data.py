"""Generated scenes as model inputs and targets, for training and for held-out evaluation.

Why several scene sizes: the apps feed frames of any aspect (4:3, 16:9, square, portrait) through
the model's preprocessing, so the models train on scenes of those sizes letterboxed (detector) or
stretched (segmenter) to their input, exactly as the application info says. Training scenes and
held-out scenes are disjoint index ranges of the same generator seed: step ``s`` of a run with
batch ``B`` reads scenes ``s*B .. s*B+B-1``, evaluation reads ``HELD_OUT_START + i``.

Batches are built in worker processes (numpy and OpenCV only) while the model trains; a batch is a
function of its indices alone, so the number of workers does not change what is trained on.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import multiprocessing
from collections.abc import Callable, Iterator

import cv2
import numpy as np

from edgefuse import preprocess
from edgefuse.vision.scenes.shapes import Scene, SceneGenerator

SCENE_SIZES = ((256, 256), (240, 320), (180, 320), (320, 240))
HELD_OUT_START = 10_000_000
PAD_VALUE = 114
IMAGENET_MEAN = np.array(preprocess.IMAGENET_MEAN, dtype=np.float32)
IMAGENET_STD = np.array(preprocess.IMAGENET_STD, dtype=np.float32)


@functools.cache
def _generators(seed: int) -> tuple[SceneGenerator, ...]:
    return tuple(SceneGenerator(seed, size) for size in SCENE_SIZES)


def held_out(seed: int, start: int, stop: int) -> list[Scene]:
    """Held-out scenes ``start .. stop-1`` (indices from ``HELD_OUT_START``)."""
    return [scene(seed, HELD_OUT_START + i) for i in range(start, stop)]


def scene(seed: int, index: int) -> Scene:
    """Scene ``index`` of the stream: its size cycles through ``SCENE_SIZES``."""
    generators = _generators(seed)
    return generators[index % len(generators)].scene(index)


@dataclasses.dataclass(frozen=True)
class Letterbox:
    """Where the scaled image sits in the model input: input = image * scale + (left, top)."""

    scale: float
    pad_left: int
    pad_top: int

    def boxes_to_input(self, boxes: np.ndarray) -> np.ndarray:
        offset = np.array([self.pad_left, self.pad_top] * 2, dtype=np.float32)
        return boxes * self.scale + offset

    def boxes_to_image(self, boxes: np.ndarray) -> np.ndarray:
        offset = np.array([self.pad_left, self.pad_top] * 2, dtype=np.float64)
        return (boxes - offset) / self.scale


def letterbox(image: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, Letterbox]:
    """Ultralytics' letterbox (contracts.md): keep aspect, centre, pad 114, odd pixel at the end."""
    height, width = image.shape[:2]
    target_h, target_w = size
    scale = min(target_h / height, target_w / width)
    new_w, new_h = round(width * scale), round(height * scale)
    left = round((target_w - new_w) / 2 - 0.1)
    top = round((target_h - new_h) / 2 - 0.1)
    if (new_w, new_h) != (width, height):
        image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    canvas = np.full((target_h, target_w, 3), PAD_VALUE, dtype=np.uint8)
    canvas[top:top + new_h, left:left + new_w] = image
    return canvas, Letterbox(scale, left, top)


def detector_input(image: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, Letterbox]:
    """uint8 BGR frame -> float32 [3, H, W] RGB / 255 and the letterbox geometry."""
    boxed, geometry = letterbox(image, size)
    return boxed[:, :, ::-1].transpose(2, 0, 1).astype(np.float32) / 255.0, geometry


def segmenter_input(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 BGR frame -> float32 [3, H, W]: stretched, RGB / 255, ImageNet mean and std."""
    resized = cv2.resize(image, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
    rgb = resized[:, :, ::-1].astype(np.float32) / 255.0
    return ((rgb - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)


@dataclasses.dataclass
class DetectBatch:
    images: np.ndarray  # float32 [B, 3, H, W]
    boxes: list[np.ndarray]  # per image float32 [M, 4] xyxy in input pixels
    classes: list[np.ndarray]  # per image int64 [M]


@dataclasses.dataclass
class SegmentBatch:
    images: np.ndarray  # float32 [B, 3, H, W]
    masks: np.ndarray  # int64 [B, H, W] labels at input resolution


def detect_batch(seed: int, indices: range, size: tuple[int, int]) -> DetectBatch:
    images, boxes, classes = [], [], []
    for index in indices:
        item = scene(seed, index)
        tensor, geometry = detector_input(item.image, size)
        images.append(tensor)
        boxes.append(geometry.boxes_to_input(item.boxes).astype(np.float32))
        classes.append(item.classes)
    return DetectBatch(np.stack(images), boxes, classes)


def segment_batch(seed: int, indices: range, size: tuple[int, int]) -> SegmentBatch:
    images, masks = [], []
    for index in indices:
        item = scene(seed, index)
        images.append(segmenter_input(item.image, size))
        masks.append(cv2.resize(item.mask, (size[1], size[0]), interpolation=cv2.INTER_NEAREST))
    return SegmentBatch(np.stack(images), np.stack(masks).astype(np.int64))


def batches(
    make: Callable[[int, range, tuple[int, int]], object],
    seed: int,
    size: tuple[int, int],
    batch: int,
    steps: int,
    workers: int,
    first_step: int = 0,
) -> Iterator[object]:
    """Batches for steps ``first_step .. steps-1``, built by ``workers`` processes (0: inline)."""
    ranges = (range(step * batch, (step + 1) * batch) for step in range(first_step, steps))
    if workers == 0:
        for indices in ranges:
            yield make(seed, indices, size)
        return
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending: collections.deque = collections.deque()
        for indices in ranges:
            pending.append(pool.submit(make, seed, indices, size))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
