"""Fixed scenes for the drawing tests: frames from the shapes generator with known boxes, tracks,
lines, zones and masks, rendered through the apps' own drawing (``Detector.annotate``,
``Tracked.annotate``, ``Segmenter.annotate``).

Why the generator's frames and labels rather than a model's output: the pictures must be the same
on every machine and every run (the golden images compare them pixel by pixel), and a crowded
frame must be crowded on purpose (``crowded`` puts 40 objects in a 320x240 frame, several at its
edges). ``python -m tests.vision.draw.scenes OUT_DIR`` writes every scene as a PNG to look at;
``--golden`` rewrites the committed golden images (``tests/vision/draw/golden``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.task import Tracked, TrackedResult
from edgefuse.vision.analytics.zone import Zone
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.scenes.shapes import CLASSES, SceneGenerator
from edgefuse.vision.segment.decode import Segmentation
from edgefuse.vision.segment.instances import InstanceMask, Instances
from edgefuse.vision.segment.segmenter import Segmenter
from edgefuse.vision.track.byte_tracker import Tracks
from tests.vision.models import channel_logits_model, constant_model, yolov8_output

GOLDEN = Path(__file__).parent / "golden"
SIZE = (240, 320)  # height, width


def frame(seed: int, index: int) -> Any:
    """The generator's scene ``index``, its image smoothed and posterised: the drawing is what
    is compared, and without the sensor grain the golden PNGs are a fifth of the size."""
    scene = SceneGenerator(seed, SIZE).scene(index)
    smooth = cv2().GaussianBlur(scene.image, (7, 7), 0) // 16 * 16
    return dataclasses.replace(scene, image=smooth)


@contextlib.contextmanager
def detector() -> Iterator[Detector]:
    """A Detector whose drawing the scenes use (its model's outputs are never decoded here)."""
    with Detector.open(constant_model(yolov8_output(classes=len(CLASSES))), backends="cpu",
                       class_names=CLASSES) as opened:
        yield opened


def crowded_detections(seed: int = 5, count: int = 40,
                       size: tuple[int, int] = SIZE) -> Detections:
    """``count`` boxes of 14..40 pixels scattered over the frame, some cut by its edges."""
    rng = np.random.default_rng(seed)
    height, width = size
    sides = rng.uniform(14, 40, size=(count, 2))
    corners = rng.uniform((-10, -10), (width - 5, height - 5), size=(count, 2))
    boxes = np.concatenate([corners, corners + sides], axis=1).astype(np.float32)
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, width)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, height)
    return Detections(boxes, rng.uniform(0.3, 0.99, count).astype(np.float32),
                      rng.integers(0, len(CLASSES), count))


def crowded() -> np.ndarray:
    """40 labelled boxes on a generated frame, no tracking."""
    image = frame(3, 0).image
    with detector() as task:
        return task.annotate(image, crowded_detections())


def tracked() -> np.ndarray:
    """A generated frame's objects as tracks (IDs), one untracked detection, a counting line
    across the middle and a zone, with their counts in the panel."""
    scene = frame(0, 4)
    boxes = scene.boxes.astype(np.float32)
    boxes = np.concatenate([boxes, [[290, 100, 320, 150]]]).astype(np.float32)  # at the edge
    classes = np.concatenate([scene.classes, [2]])
    count = len(boxes)
    scores = np.linspace(0.95, 0.45, count).astype(np.float32)
    detections = Detections(boxes, scores, classes)
    tracks = Tracks(boxes[:-1], scores[:-1], classes[:-1], np.arange(1, count) + 6,
                    np.arange(count - 1))
    line = LineCounter("middle", (0.0, 120.0), (320.0, 120.0))
    line.counts = {"in": collections.Counter(circle=1), "out": collections.Counter(star=2)}
    zone = Zone("dock", [(200, 150), (310, 150), (310, 235), (200, 235)])
    with detector() as task:
        wrapped = Tracked(task, lines=[line], zones=[zone])
        return wrapped.annotate(scene.image, TrackedResult(detections, tracks, [], {}))


def semantic() -> np.ndarray:
    """A generated frame's class mask drawn as a class map (outline, light fill, legend)."""
    scene = frame(1, 2)
    names = ("background", *CLASSES)
    with Segmenter.open(channel_logits_model(), backends="cpu", class_names=names[:3]) as task:
        task.class_names = names
        return task.annotate(scene.image, Segmentation(scene.mask, len(names)))


def instances() -> np.ndarray:
    """A generated frame's objects as instances: masks, boxes with labels, the legend."""
    scene = frame(2, 1)
    masks = []
    for index, box in enumerate(scene.boxes.astype(int)):
        x1, y1, x2, y2 = box
        masks.append(InstanceMask(int(x1), int(y1), scene.instances[y1:y2, x1:x2] == index + 1))
    detections = Detections(scene.boxes.astype(np.float32),
                            np.linspace(0.9, 0.5, len(masks)).astype(np.float32), scene.classes)
    with Segmenter.open(channel_logits_model(), backends="cpu", class_names=CLASSES[:3]) as task:
        task.class_names, task.instances = CLASSES, True
        return task.annotate(scene.image, Instances(detections, masks, [], SIZE, len(CLASSES)))


SCENES: dict[str, Callable[[], np.ndarray]] = {
    "crowded": crowded, "tracked": tracked, "semantic": semantic, "instances": instances}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder for the PNGs")
    parser.add_argument("--golden", action="store_true", help="rewrite the golden images")
    args = parser.parse_args()
    folder = GOLDEN if args.golden else args.out
    if folder is None:
        parser.error("give OUT_DIR or --golden")
    folder.mkdir(parents=True, exist_ok=True)
    for name, render in SCENES.items():
        path = folder / f"{name}.png"
        cv2().imwrite(str(path), render(), [cv2().IMWRITE_PNG_COMPRESSION, 9])
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
