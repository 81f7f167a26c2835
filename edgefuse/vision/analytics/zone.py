"""A polygon zone: who is inside now, who entered and left, and for how long each stayed.

Why per-track state with hysteresis: occupancy from one frame's boxes is easy, but entries,
exits and dwell need to know each track's history, and an anchor on the border flickers in and
out. A track's state changes only after ``confirm_frames`` consecutive frames on the other side
(DeepStream's nvdsanalytics ROI filtering uses a similar frame count); dwell is measured in the
frames' own times (their media time: a file's pts, a camera's monotonic capture clock), so a slow
pipeline does not stretch it and a wall-clock step (NTP's first answer on a board that booted in
1970) does not make it negative or a day long.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.vision.analytics.anchors import anchor_points, check_anchor, first_outside
from edgefuse.vision.analytics.line import _label
from edgefuse.vision.track.byte_tracker import Tracks


@dataclasses.dataclass
class _Presence:
    inside: bool
    since: float  # time the current state was confirmed
    pending: int  # consecutive frames seen on the other side
    last_frame: int
    class_label: str


def points_in_polygon(points: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """Even-odd rule, [N] booleans (points on an edge may fall either way)."""
    x, y = points[:, 0:1], points[:, 1:2]
    x1, y1 = polygon[:, 0], polygon[:, 1]
    x2, y2 = np.roll(x1, -1), np.roll(y1, -1)
    straddles = (y1 > y) != (y2 > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        crossing_x = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
    return np.count_nonzero(straddles & (x < crossing_x), axis=1) % 2 == 1


class Zone:
    """Occupancy, entries, exits and dwell of tracks whose anchor is inside ``polygon``."""

    def __init__(self, name: str, polygon: list[tuple[float, float]], *,
                 anchor: str = "bottom_center", confirm_frames: int = 2,
                 forget_after: int = 300) -> None:
        self.name = name
        self.polygon = np.asarray(polygon, dtype=np.float64).reshape(-1, 2) if len(polygon) else (
            np.zeros((0, 2)))
        if len(self.polygon) < 3:
            raise InputError(f"zone {name!r} has {len(self.polygon)} points; a polygon needs "
                             "at least 3", reference=Ref.BAD_CONFIG)
        area = 0.5 * abs(float(np.dot(self.polygon[:, 0], np.roll(self.polygon[:, 1], -1))
                               - np.dot(self.polygon[:, 1], np.roll(self.polygon[:, 0], -1))))
        if area == 0.0:
            raise InputError(f"zone {name!r} has no area (its points are on one line)",
                             reference=Ref.BAD_CONFIG)
        check_anchor(f"zone {name!r}", anchor)
        if confirm_frames < 1:
            raise InputError(f"zone {name!r}: confirm_frames must be >= 1",
                             reference=Ref.BAD_CONFIG)
        self.anchor, self.confirm_frames, self.forget_after = anchor, confirm_frames, forget_after
        self._presence: dict[int, _Presence] = {}
        self._frame = 0
        self.entries: Counter = Counter()
        self.exits: Counter = Counter()

    def check_within(self, width: int, height: int) -> None:
        """Refuse a zone that lies outside a ``width`` x ``height`` frame."""
        point = first_outside(self.polygon, width, height)
        if point is not None:
            raise InputError(f"zone {self.name!r} has a point {point} outside the "
                             f"{width}x{height} frame", reference=Ref.BAD_CONFIG,
                             hint="zone points are pixels of the source frame")

    def rescale(self, scale_x: float, scale_y: float) -> None:
        """The polygon in a frame scaled by ``scale_x``, ``scale_y`` (who is inside is kept)."""
        self.polygon = self.polygon * np.array([scale_x, scale_y])

    def occupancy(self) -> dict[str, int]:
        counts = Counter(p.class_label for p in self._presence.values() if p.inside)
        return dict(sorted(counts.items()))

    def update(self, tracks: Tracks, time: float,
               names: list[str] | None = None) -> list[dict[str, Any]]:
        """Entries and exits confirmed on this frame (at ``time``: a clock that never steps, in
        seconds; dwell is differences of it), as events."""
        self._frame += 1
        events = []
        inside = points_in_polygon(anchor_points(tracks.boxes, self.anchor), self.polygon)
        for is_inside, track_id, class_id in zip(inside, tracks.ids, tracks.classes,
                                                 strict=True):
            label = _label(names, int(class_id))
            key = int(track_id)
            presence = self._presence.get(key)
            if presence is None:
                presence = _Presence(False, time, 0, self._frame, label)
                self._presence[key] = presence
            presence.last_frame, presence.class_label = self._frame, label
            if bool(is_inside) == presence.inside:
                presence.pending = 0
                continue
            presence.pending += 1
            if presence.pending < self.confirm_frames:
                continue
            presence.inside, presence.pending = bool(is_inside), 0
            if presence.inside:
                presence.since = time
                self.entries[label] += 1
                events.append({"type": "zone_entered", "zone": self.name,
                               "track_id": key, "class": label})
            else:
                self.exits[label] += 1
                events.append({"type": "zone_left", "zone": self.name, "track_id": key,
                               "class": label, "dwell_s": round(time - presence.since, 3)})
                presence.since = time
        self._forget()
        return events

    def dwell(self, time: float) -> dict[int, float]:
        """Seconds each track now inside has been there."""
        return {k: time - p.since for k, p in self._presence.items() if p.inside}

    def _forget(self) -> None:
        stale = [k for k, p in self._presence.items()
                 if self._frame - p.last_frame > self.forget_after]
        for key in stale:
            del self._presence[key]
