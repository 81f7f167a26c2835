"""What a stream counted, for the last line of the run's summary.

Why a sink: it sees every frame's result in order, on the stream's sink thread, whatever the
task, and needs nothing from the task but its class names. It keeps counts only (the tracks
seen are counted as their IDs first appear: a tracker's IDs only grow), so a camera that runs
for months holds a few integers per class.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.task import TrackedResult
from edgefuse.vision.draw.overlay import label_of
from edgefuse.vision.segment.instances import Instances
from edgefuse.vision.streams.frames import FrameResult
from edgefuse.vision.streams.sinks import Sink


class Tally(Sink):
    """Per stream: frames, objects detected per class, tracks started per class, and the last
    line and zone counts."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.frames = 0
        self.detections: collections.Counter[str] = collections.Counter()
        self.tracks: collections.Counter[str] = collections.Counter()
        self.counts: dict[str, Any] = {}
        self._highest_id = 0
        self._objects = False  # whether the task gives objects (not a semantic class map)
        self._tracked = False

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        found = result.result
        self.frames += 1
        if isinstance(found, TrackedResult):
            self._tracked = True
            for track_id, class_id in zip(found.tracks.ids, found.tracks.classes, strict=True):
                if int(track_id) > self._highest_id:
                    self.tracks[label_of(self.names, int(class_id))] += 1
            if len(found.tracks.ids):
                self._highest_id = max(self._highest_id, int(np.max(found.tracks.ids)))
            self.counts = found.counts
            found = found.detections
        if isinstance(found, Instances):
            found = found.detections
        if isinstance(found, Detections):
            self._objects = True
            self.detections.update(label_of(self.names, int(c)) for c in found.classes)

    def line(self) -> str:
        """``door in 3 out 2; dock 5 entered, 2 now; 14 tracks (person 12, cart 2)``, or the
        detections per class without tracking; empty for a task that counts no objects."""
        parts = []
        for name, totals in self.counts.get("lines", {}).items():
            parts.append(f"{name} in {sum(totals['in'].values())} "
                         f"out {sum(totals['out'].values())}")
        for name, zone in self.counts.get("zones", {}).items():
            parts.append(f"{name} {sum(zone['entries'].values())} entered, "
                         f"{sum(zone['occupancy'].values())} now")
        if self._tracked:
            parts.append(f"{sum(self.tracks.values())} tracks{_by_class(self.tracks)}")
        elif self._objects:
            parts.append(f"{sum(self.detections.values())} detections in {self.frames} "
                         f"frames{_by_class(self.detections)}")
        return "; ".join(parts)


def _by_class(counter: collections.Counter[str]) -> str:
    if not counter:
        return ""
    return " (" + ", ".join(f"{name} {count}" for name, count in sorted(counter.items())) + ")"
