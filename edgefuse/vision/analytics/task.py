"""A detection task with tracking, counting lines, zones and events: ``Tracked(detector, ...)``.

Why a wrapper over the task rather than new pipeline stages: the pipeline runs each stage in one
thread, so ``postprocess`` sees the frames of a stream in order, which is all a tracker and a
line counter need; a wrapper keeps the pipeline unchanged and works for any detector, the apps'
or a user's. One ``Tracked`` per stream: its tracker's IDs, its lines' counts and its zones'
dwell times are that camera's own.

Per frame: the detector's boxes, then ByteTrack IDs, then line crossings and zone entries/exits
as events (each stamped with the stream's name and the frame's capture times: ``time``, the wall
clock, and ``mono``, the monotonic clock) handed to every publisher (MQTT, webhook) and listed in
the frame's JSON record, with the running counts. Zones measure dwell on the frames' media time
(``frames.media_time``: a file's pts, else the monotonic capture clock), never on the wall clock,
which a board steps when NTP first answers.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.anchors import anchor_points
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.zone import Zone
from edgefuse.vision.draw.analytics import (
    count_rows,
    draw_lines,
    draw_tags,
    draw_trails,
    draw_zones,
    place_tags,
)
from edgefuse.vision.draw.labels import LabelPlacer
from edgefuse.vision.draw.overlay import label_of
from edgefuse.vision.draw.panel import draw_panel, panel_rect
from edgefuse.vision.draw.text import TextStyle
from edgefuse.vision.streams.frames import Frame, media_time
from edgefuse.vision.track.byte_tracker import ByteTracker, Tracks

log = logging.getLogger(__name__)

TRAIL = 30  # anchor points kept per track for drawing
ASPECT_TOLERANCE = 0.01  # relative: 1280x720 -> 854x480 is the same picture, 640x480 is not


class Publisher(Protocol):
    def publish(self, event: dict[str, Any]) -> None: ...


OnEvents = Callable[[list[dict[str, Any]], Frame, Tracks], None]


@dataclasses.dataclass
class TrackedResult:
    detections: Detections
    tracks: Tracks
    events: list[dict[str, Any]]
    counts: dict[str, Any]


class Tracked:
    """``task`` (a Detector) with tracking and analytics for the stream ``stream``."""

    takes_frame = True  # the pipeline hands ``postprocess`` the frame (its capture time)

    def __init__(self, task: Any, *, stream: str = "stream0", tracker: ByteTracker | None = None,
                 lines: Sequence[LineCounter] = (), zones: Sequence[Zone] = (),
                 publishers: Sequence[Publisher] = (), check_first_frame: bool = False,
                 on_events: OnEvents | None = None) -> None:
        self.task, self.stream = task, stream
        self.on_events = on_events  # sees a frame's events before they are published
        self.tracker = tracker or ByteTracker()
        self.lines, self.zones, self.publishers = list(lines), list(zones), list(publishers)
        self._trails: dict[int, collections.deque] = {}
        self._size_checked = not check_first_frame  # lines and zones against the first frame
        self._size: tuple[int, int] | None = None  # (width, height) lines and zones are pixels of
        self.resized = 0  # size changes the lines and zones were rescaled to
        self.events_total = 0

    def __getattr__(self, name: str) -> Any:  # layout, class_names, warm_up, session, ...
        return getattr(self.task, name)

    def preprocess(self, image: np.ndarray) -> tuple[dict[str, np.ndarray], Any]:
        return self.task.preprocess(image)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.task.infer(feeds)

    def check_within(self, width: int, height: int) -> None:
        """Refuse lines and zones outside a ``width`` x ``height`` frame (the apps check before
        the run where the source knows its size, else with ``check_first_frame`` at the first
        frame, which then stops the run)."""
        for item in [*self.lines, *self.zones]:
            item.check_within(width, height)
        self._size_checked = True
        self._size = (width, height)

    def follow_size(self, width: int, height: int) -> None:
        """A frame of ``width`` x ``height`` after frames of another size (a camera that
        switched resolution mid-stream): with the same aspect ratio it is the same picture
        resampled, so lines, zones and tracks are rescaled with it (IDs and counts go on);
        another aspect ratio is another crop of the scene, where lines and zones drawn in
        pixels of the old one mean nothing, so the stream is refused (``error[bad-source]``)."""
        old_width, old_height = self._size
        if (width, height) == (old_width, old_height):
            return
        old_aspect, aspect = old_width / old_height, width / height
        if abs(aspect - old_aspect) > ASPECT_TOLERANCE * old_aspect:
            raise InputError(
                f"stream {self.stream!r}: the frame size changed from {old_width}x{old_height} "
                f"to {width}x{height} mid-stream; its lines and zones are pixels of "
                f"{old_width}x{old_height}, and another aspect ratio is another crop of the "
                "scene, onto which they cannot be mapped",
                hint="keep the camera at one resolution (a change of resolution with the same "
                     "aspect ratio is followed: lines and zones are rescaled)",
                reference=Ref.BAD_SOURCE)
        scale_x, scale_y = width / old_width, height / old_height
        for item in [*self.lines, *self.zones]:
            item.rescale(scale_x, scale_y)
        self.tracker.rescale(scale_x, scale_y)
        for trail in self._trails.values():
            trail.extend([(x * scale_x, y * scale_y) for x, y in
                          [trail.popleft() for _ in range(len(trail))]])
        log.warning("%s: the frame size changed from %dx%d to %dx%d mid-stream; lines and zones "
                    "rescaled with it", self.stream, old_width, old_height, width, height)
        self._size = (width, height)
        self.resized += 1

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Any,
                    frame: Frame | None = None) -> TrackedResult:
        if frame is not None and (self.lines or self.zones):
            size = frame.size
            if not self._size_checked:
                self.check_within(*size)
            elif self._size is None:  # not checked, by the caller's choice: the size is noted
                self._size = size
            else:
                self.follow_size(*size)
        detections = self.task.postprocess(outputs, geometry)
        tracks = self.tracker.update(detections)
        wall = frame.time if frame is not None else time.time()
        mono = frame.clock if frame is not None else time.perf_counter()
        names = list(self.task.class_names)
        events = []
        for line in self.lines:
            events += line.update(tracks, names)
        for zone in self.zones:
            events += zone.update(tracks, media_time(frame) if frame is not None else mono, names)
        for event in events:
            event.update(stream=self.stream, time=round(wall, 3), mono=round(mono, 3))
        if events and self.on_events is not None and frame is not None:
            self.on_events(events, frame, tracks)  # e.g. adds each event's snapshot
        for event in events:
            for publisher in self.publishers:
                publisher.publish(event)
        self.events_total += len(events)
        self._remember(tracks)
        return TrackedResult(detections, tracks, events, self.counts())

    def counts(self) -> dict[str, Any]:
        return {"lines": {line.name: line.totals() for line in self.lines},
                "zones": {zone.name: {"occupancy": zone.occupancy(),
                                      "entries": dict(sorted(zone.entries.items())),
                                      "exits": dict(sorted(zone.exits.items()))}
                          for zone in self.zones}}

    def annotate(self, image: np.ndarray, result: TrackedResult) -> np.ndarray:
        """Zones and lines with their names, then one box and label per object (``#7 person
        0.91`` for a track, ``person 0.91`` for a detection no track took), trails, and the
        counts in a panel in the top-right corner that no label covers."""
        height, width = image.shape[:2]
        style = TextStyle.for_frame(height, width)
        rows = count_rows(self.lines, self.zones)
        panel = panel_rect(image.shape, rows, style, corner="top-right")
        placer = LabelPlacer(width, height, [panel] if panel else [])
        tags = place_tags(image.shape, self.lines, self.zones, placer, style)
        out = image.copy()
        draw_zones(out, self.zones)
        draw_lines(out, self.lines)
        objects, ids = _objects(result)
        out = self.task.annotate(out, objects, ids=ids, placer=placer)
        draw_trails(out, result.tracks.ids, {k: list(v) for k, v in self._trails.items()},
                    self.task.colours)
        draw_tags(out, tags, style)
        if panel:
            draw_panel(out, rows, style, panel)
        return out

    def describe(self, result: TrackedResult) -> dict[str, Any]:
        """The record's ``tracks`` (the objects tracked on this frame: an ID each, and
        ``detection``, the index in ``detections`` of the box it took, -1 when it took none and
        its box is the tracker's prediction) beside the detector's own ``detections`` (every
        box the detector kept, tracked or not), and the frame's events and counts."""
        names = self.task.class_names
        tracks = result.tracks
        record = {"stream": self.stream, "tracks": [
            {"id": int(i), "class": label_of(names, int(c)), "class_id": int(c),
             "score": round(float(s), 4), "box": [round(float(v), 2) for v in box],
             "detection": int(d)}
            for i, box, s, c, d in zip(tracks.ids, tracks.boxes, tracks.scores, tracks.classes,
                                       tracks.detection_index, strict=True)]}
        record.update(self.task.describe(result.detections))
        if result.events:
            record["events"] = result.events
        if self.lines or self.zones:
            record["counts"] = result.counts
        return record

    def _remember(self, tracks: Tracks) -> None:
        points = anchor_points(tracks.boxes, "bottom_center")
        alive = set()
        for track_id, point in zip(tracks.ids, points, strict=True):
            trail = self._trails.setdefault(int(track_id), collections.deque(maxlen=TRAIL))
            trail.append((float(point[0]), float(point[1])))
            alive.add(int(track_id))
        for gone in set(self._trails) - alive:  # drawn only while shown; memory stays bounded
            del self._trails[gone]


def _objects(result: TrackedResult) -> tuple[Detections, np.ndarray]:
    """The tracks, then the detections no track took this frame, as one set of boxes with
    their track IDs (-1 for the untracked): each object is drawn once, with one label."""
    tracks = result.tracks
    taken = set(int(i) for i in tracks.detection_index if i >= 0)
    rest = np.array([i for i in range(len(result.detections)) if i not in taken], np.int64)
    detections = result.detections
    boxes = np.concatenate([np.asarray(tracks.boxes, np.float32).reshape(-1, 4),
                            np.asarray(detections.boxes, np.float32).reshape(-1, 4)[rest]])
    scores = np.concatenate([np.asarray(tracks.scores, np.float32),
                             np.asarray(detections.scores, np.float32)[rest]])
    classes = np.concatenate([np.asarray(tracks.classes, np.int64),
                              np.asarray(detections.classes, np.int64)[rest]])
    ids = np.concatenate([np.asarray(tracks.ids, np.int64), np.full(len(rest), -1, np.int64)])
    return Detections(boxes, scores, classes), ids
