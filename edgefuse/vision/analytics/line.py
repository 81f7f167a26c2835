"""A counting line: each track counted once per crossing, in or out, per class.

Why hysteresis on the anchor's side: a box that lingers on the line jitters across it by a pixel
or two every frame, and a counter that compares the side on two consecutive frames counts each
jitter (the complaint users of frame-to-frame line counters repeat most). Here a track's side is
only settled when its anchor is more than ``margin`` pixels from the line; a crossing is counted
when the settled side flips, and only when the anchor's path between the two settled points
passes through the segment (not beside its ends). A track that touches the line and goes back
never flips; one that crosses and comes back is counted twice, once each way.

Direction: looking along the line from ``start`` to ``end`` in image coordinates (y down), ``in``
is a crossing from the left-hand side to the right-hand side, ``out`` the other way.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.vision.analytics.anchors import anchor_points, check_anchor, first_outside
from edgefuse.vision.track.byte_tracker import Tracks


@dataclasses.dataclass
class _Side:
    side: int  # +1 right of start->end, -1 left
    point: np.ndarray  # the anchor where that side was last settled
    last_frame: int


class LineCounter:
    """Counts tracks crossing the segment ``start`` -> ``end`` (pixels)."""

    def __init__(self, name: str, start: tuple[float, float], end: tuple[float, float], *,
                 margin: float = 3.0, anchor: str = "bottom_center", forget_after: int = 300
                 ) -> None:
        self.name = name
        self.start = np.asarray(start, dtype=np.float64)
        self.end = np.asarray(end, dtype=np.float64)
        length = float(np.hypot(*(self.end - self.start)))
        if length == 0.0:
            raise InputError(f"line {name!r} has zero length (start and end are both {start})",
                             hint="give two different points", reference=Ref.BAD_CONFIG)
        check_anchor(f"line {name!r}", anchor)
        if margin < 0:
            raise InputError(f"line {name!r}: margin {margin} is negative",
                             reference=Ref.BAD_CONFIG)
        self.margin, self.anchor, self.forget_after = margin, anchor, forget_after
        self._direction = (self.end - self.start) / length
        self._sides: dict[int, _Side] = {}
        self._frame = 0
        self.counts: dict[str, Counter] = {"in": Counter(), "out": Counter()}

    def check_within(self, width: int, height: int) -> None:
        """Refuse a line with an end outside a ``width`` x ``height`` frame."""
        point = first_outside(np.stack([self.start, self.end]), width, height)
        if point is not None:
            raise InputError(f"line {self.name!r} has an end {point} outside the "
                             f"{width}x{height} frame", reference=Ref.BAD_CONFIG,
                             hint="line ends are pixels of the source frame")

    def rescale(self, scale_x: float, scale_y: float) -> None:
        """The line (its ends, margin and the tracks' settled points) in a frame scaled by
        ``scale_x``, ``scale_y``: the same place in the picture at its new size."""
        factors = np.array([scale_x, scale_y])
        self.start, self.end = self.start * factors, self.end * factors
        self.margin *= float(np.sqrt(scale_x * scale_y))
        self._direction = (self.end - self.start) / float(np.hypot(*(self.end - self.start)))
        for known in self._sides.values():
            known.point = known.point * factors

    def update(self, tracks: Tracks, names: list[str] | None = None) -> list[dict[str, Any]]:
        """The crossings on this frame, as events; counts are updated."""
        self._frame += 1
        events = []
        points = anchor_points(tracks.boxes, self.anchor)
        for point, track_id, class_id in zip(points, tracks.ids, tracks.classes, strict=True):
            distance = self._signed_distance(point)
            if abs(distance) <= self.margin:
                continue
            side = 1 if distance > 0 else -1
            known = self._sides.get(int(track_id))
            self._sides[int(track_id)] = _Side(side, point, self._frame)
            if known is None or known.side == side or not self._through_segment(known.point,
                                                                                 point):
                continue
            direction = "in" if side > 0 else "out"
            label = _label(names, int(class_id))
            self.counts[direction][label] += 1
            events.append({"type": "line_crossed", "line": self.name, "direction": direction,
                           "track_id": int(track_id), "class": label})
        stale = [key for key, known in self._sides.items()
                 if self._frame - known.last_frame > self.forget_after]
        for key in stale:
            del self._sides[key]
        return events

    def totals(self) -> dict[str, dict[str, int]]:
        return {direction: dict(sorted(counter.items())) for direction, counter in
                self.counts.items()}

    def _signed_distance(self, point: np.ndarray) -> float:
        # cross(direction, point - start): > 0 on the right-hand side when y points down
        offset = point - self.start
        return float(self._direction[0] * offset[1] - self._direction[1] * offset[0])

    def _through_segment(self, before: np.ndarray, after: np.ndarray) -> bool:
        """Whether the path before -> after meets the segment (between its ends)."""
        d_before, d_after = self._signed_distance(before), self._signed_distance(after)
        t = d_before / (d_before - d_after)
        crossing = before + t * (after - before)
        along = float(np.dot(crossing - self.start, self._direction))
        return 0.0 <= along <= float(np.hypot(*(self.end - self.start)))


def _label(names: list[str] | None, class_id: int) -> str:
    if names and 0 <= class_id < len(names):
        return names[class_id]
    return f"class{class_id}"
