"""Moving objects with identities, as boxes: the ground truth a tracker is scored against.

Why boxes and not pixels: to score a tracker apart from any detector (the first of the two modes
trackers are evaluated in: ground-truth boxes with controlled noise and drop-outs), the
detections must be the truth plus exactly the errors asked for. Objects enter from a border, walk
with a slowly turning heading (so paths cross), and leave through a border; each frame lists the
true boxes with their identities, and ``detections`` derives what a detector would report: boxes
jittered by a fraction of their size, some missed, some scored low (the partly occluded objects
ByteTrack's second round exists for), and a few false positives. A function of the seed only.
(Clips with pixels, for the second mode through a trained detector, are
``edgefuse.vision.scenes.shapes.SceneGenerator.clip``: their ``Scene.ids`` are identities too.)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from edgefuse.metrics.detect import Detections


@dataclasses.dataclass(frozen=True)
class TruthFrame:
    """The objects in view on one frame: boxes xyxy [K, 4], identities [K], classes [K]."""

    boxes: np.ndarray
    ids: np.ndarray
    classes: np.ndarray


@dataclasses.dataclass(frozen=True)
class DetectionNoise:
    """What a detector gets wrong: jitter (sigma, fraction of box size), misses, low scores."""

    jitter: float = 0.03
    miss_rate: float = 0.05
    low_score_rate: float = 0.1  # reported with a score in (0.15, 0.45)
    false_positives: float = 0.2  # per frame, on average


def walkers(seed: int = 0, frames: int = 600, size: tuple[int, int] = (720, 1280),
            population: int = 20, classes: int = 2) -> list[TruthFrame]:
    """``frames`` frames of about ``population`` objects entering, crossing and leaving."""
    rng = np.random.default_rng(seed)
    height, width = size
    objects: dict[int, list[float]] = {}  # id -> [x, y, heading, speed, w, h, class]
    next_id = 0
    out = []
    for _ in range(frames):
        while len(objects) < population and rng.random() < 0.3:
            objects[next_id] = _enter(rng, width, height, classes)
            next_id += 1
        boxes, ids, labels = [], [], []
        for key in list(objects):
            x, y, heading, speed, w, h, cls = objects[key]
            heading += rng.normal(0.0, 0.03)
            x, y = x + speed * math.cos(heading), y + speed * math.sin(heading)
            if not (-w < x < width + w and -h < y < height + h):
                del objects[key]
                continue
            objects[key] = [x, y, heading, speed, w, h, cls]
            box = np.clip([x - w / 2, y - h / 2, x + w / 2, y + h / 2], 0,
                          [width, height, width, height])
            if (box[2] - box[0]) * (box[3] - box[1]) >= 0.3 * w * h:  # mostly in view
                boxes.append(box)
                ids.append(key)
                labels.append(int(cls))
        out.append(TruthFrame(np.array(boxes, dtype=np.float32).reshape(-1, 4),
                              np.array(ids, dtype=np.int64), np.array(labels, dtype=np.int64)))
    return out


def detections(truth: list[TruthFrame], noise: DetectionNoise, seed: int = 0,
               size: tuple[int, int] = (720, 1280)) -> list[tuple[Detections, np.ndarray]]:
    """Per frame, the detections and, for each, the true identity it came from (-1: false)."""
    rng = np.random.default_rng(seed + 1)
    height, width = size
    out = []
    for frame in truth:
        keep = rng.random(len(frame.ids)) >= noise.miss_rate
        boxes = frame.boxes[keep].astype(np.float64)
        sides = np.repeat(np.stack([boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], 1), 2, 1)
        boxes = boxes + rng.normal(0.0, noise.jitter, boxes.shape) * sides
        scores = rng.uniform(0.6, 0.95, len(boxes))
        low = rng.random(len(boxes)) < noise.low_score_rate
        scores[low] = rng.uniform(0.15, 0.45, int(low.sum()))
        ids, classes = frame.ids[keep], frame.classes[keep]
        fakes = rng.poisson(noise.false_positives)
        if fakes:
            centre = rng.uniform([0, 0], [width, height], (fakes, 2))
            half = rng.uniform(15, 60, (fakes, 2))
            boxes = np.concatenate([boxes, np.concatenate([centre - half, centre + half], 1)])
            scores = np.concatenate([scores, rng.uniform(0.2, 0.7, fakes)])
            ids = np.concatenate([ids, np.full(fakes, -1)])
            classes = np.concatenate([classes, rng.integers(0, max(classes.max(initial=0), 1) + 1,
                                                            fakes)])
        out.append((Detections(boxes.astype(np.float32), scores.astype(np.float32),
                               classes.astype(np.int64)), ids.astype(np.int64)))
    return out


def _enter(rng: np.random.Generator, width: int, height: int, classes: int) -> list[float]:
    h = float(rng.uniform(0.08, 0.2) * height)
    w = h * float(rng.uniform(0.4, 1.0))
    speed = float(rng.uniform(2.0, 7.0))
    side = int(rng.integers(4))
    if side == 0:  # left border, heading right
        x, y, heading = -w / 2, rng.uniform(0.2, 0.8) * height, 0.0
    elif side == 1:
        x, y, heading = width + w / 2, rng.uniform(0.2, 0.8) * height, math.pi
    elif side == 2:  # top border, heading down
        x, y, heading = rng.uniform(0.2, 0.8) * width, -h / 2, math.pi / 2
    else:
        x, y, heading = rng.uniform(0.2, 0.8) * width, height + h / 2, -math.pi / 2
    heading += float(rng.normal(0.0, 0.3))
    return [float(x), float(y), heading, speed, w, h, float(rng.integers(classes))]
