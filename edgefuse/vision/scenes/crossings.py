"""A scripted scene with known crossings: circles walk right across a counting line, squares walk
left across it into a zone, and the counts a line counter and a zone must end with are known by
construction (``Crossings.expected``, in ``Tracked.counts`` form).

Why scripted rather than random (``tracks.walkers``): the live view, its metrics and its benches
are checked against numbers a person can state ("3 circles in, 2 squares out, 2 squares in the
bay"), without a trained detector in the loop; ``ScriptedDetector`` is the detector such a scene
implies (each frame's true boxes, in order), so a whole app run (tracker, line, zone, sinks,
server) is exercised on exact inputs. Rows are far enough apart that no two boxes ever overlap,
so a tracker's identities cannot swap.

Geometry: the line runs up the middle of the frame from ``(W/2, H - 10)`` to ``(W/2, 10)``;
looking from its start to its end, left is -x, so a left-to-right walk is ``in`` (``LineCounter``'s
convention) and a right-to-left walk is ``out``. The zone is the left 30 % of the frame: the
squares end inside it, the circles start right of it and never enter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.metrics.detect import Detections
from edgefuse.vision.draw.labels import LabelPlacer
from edgefuse.vision.draw.overlay import draw_detections
from edgefuse.vision.scenes.tracks import TruthFrame

CLASSES = ("circle", "square")
COLOURS = np.array([[70, 70, 235], [235, 150, 50]], dtype=np.uint8)  # BGR: red, blue
SIZE = 40  # box side, pixels
SCORE = 0.9


@dataclasses.dataclass(frozen=True)
class Crossings:
    """The scene: its frames' truth, the line and zone (app config form), the expected counts."""

    width: int
    height: int
    truth: list[TruthFrame]
    line: dict[str, Any]
    zone: dict[str, Any]
    expected: dict[str, Any]

    def image(self, index: int) -> np.ndarray:
        """Frame ``index``: a floor, the zone and the objects drawn in their class colours."""
        height, width = self.height, self.width
        shade = np.linspace(38, 62, height, dtype=np.float32)[:, None, None]
        image = np.broadcast_to(shade * np.array([1.0, 1.05, 1.1]), (height, width, 3))
        image = np.ascontiguousarray(image, dtype=np.uint8)
        for x in range(0, width, 40):  # floor tiles, so the frame reads as a place
            cv2().line(image, (x, 0), (x, height), (58, 60, 66), 1)
        for y in range(0, height, 40):
            cv2().line(image, (0, y), (width, y), (58, 60, 66), 1)
        frame = self.truth[index]
        for box, cls in zip(frame.boxes, frame.classes, strict=True):
            x1, y1, x2, y2 = (int(round(float(v))) for v in box)
            colour = tuple(int(c) for c in COLOURS[int(cls)])
            if cls == 0:
                cv2().circle(image, ((x1 + x2) // 2, (y1 + y2) // 2), (x2 - x1) // 2 - 2, colour,
                             -1, cv2().LINE_AA)
            else:
                cv2().rectangle(image, (x1 + 2, y1 + 2), (x2 - 2, y2 - 2), colour, -1)
        return image

    def images(self) -> Iterator[np.ndarray]:
        return (self.image(index) for index in range(len(self.truth)))


def crossings(rightward: int = 3, leftward: int = 2, *, width: int = 640, height: int = 360,
              speed: float = 12.0) -> Crossings:
    """``rightward`` circles (rows in the upper half) and ``leftward`` squares (lower half), all
    in view from the first frame, walking ``speed`` pixels a frame until every square is deep in
    the zone."""
    if rightward + leftward < 1 or rightward < 0 or leftward < 0:
        raise ValueError("a scene needs at least one walker")
    rows_up = np.linspace(0.12, 0.45, max(rightward, 1)) * height
    rows_down = np.linspace(0.62, 0.9, max(leftward, 1)) * height
    if min(np.diff(rows_up).min(initial=SIZE * 2), np.diff(rows_down).min(initial=SIZE * 2)) \
            < SIZE * 1.2:
        raise ValueError(f"{rightward} and {leftward} walkers do not fit {height} rows apart")
    zone_right = 0.3 * width
    start_right, start_left = zone_right + SIZE, 0.9 * width
    end_left = zone_right / 2
    frames = int(np.ceil((start_left - end_left) / speed)) + 1
    walkers = ([(index, 0, start_right, speed, float(y)) for index, y in
                enumerate(rows_up[:rightward])]
               + [(rightward + index, 1, start_left, -speed, float(y)) for index, y in
                  enumerate(rows_down[:leftward])])
    truth = []
    half = SIZE / 2
    for step in range(frames):
        boxes, ids, classes = [], [], []
        for key, cls, x0, velocity, y in walkers:
            x = x0 + velocity * step
            if x + half > width:  # walked out of view: gone
                continue
            boxes.append([x - half, y - half, x + half, y + half])
            ids.append(key)
            classes.append(cls)
        truth.append(TruthFrame(np.array(boxes, np.float32).reshape(-1, 4),
                                np.array(ids, np.int64), np.array(classes, np.int64)))
    middle = width / 2
    line = {"name": "door", "start": (middle, height - 10.0), "end": (middle, 10.0)}
    zone = {"name": "bay", "polygon": [(4.0, 4.0), (zone_right, 4.0), (zone_right, height - 4.0),
                                       (4.0, height - 4.0)]}
    lines_in = {"circle": rightward} if rightward else {}
    lines_out = {"square": leftward} if leftward else {}
    in_zone = {"square": leftward} if leftward else {}
    expected = {"lines": {"door": {"in": lines_in, "out": lines_out}},
                "zones": {"bay": {"occupancy": in_zone, "entries": in_zone, "exits": {}}}}
    return Crossings(width, height, truth, line, zone, expected)


class ScriptedDetector:
    """The detector a scripted scene implies: frame k's true boxes at the k-th ``postprocess``
    (a pipeline postprocesses a stream's frames in order), drawn as the apps' detectors draw."""

    class_names = CLASSES
    colours = COLOURS
    layout = "scripted"

    def __init__(self, truth: list[TruthFrame]) -> None:
        self.truth = truth
        self._next = 0

    def preprocess(self, image: np.ndarray) -> tuple[dict[str, np.ndarray], None]:
        return {}, None

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: None) -> Detections:
        frame = self.truth[min(self._next, len(self.truth) - 1)]
        self._next += 1
        return Detections(frame.boxes.copy(), np.full(len(frame.ids), SCORE, np.float32),
                          frame.classes.copy())

    def annotate(self, image: np.ndarray, detections: Detections, *,
                 ids: Sequence[int] | None = None, placer: LabelPlacer | None = None,
                 ) -> np.ndarray:
        return draw_detections(image, detections, self.class_names, self.colours, ids=ids,
                               placer=placer)

    def describe(self, detections: Detections) -> dict[str, Any]:
        return {"detections": [{"class": CLASSES[int(c)], "box": [float(v) for v in box]}
                               for box, c in zip(detections.boxes, detections.classes,
                                                 strict=True)]}
