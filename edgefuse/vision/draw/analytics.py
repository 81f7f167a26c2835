"""Tracks, counting lines and zones drawn over a frame: IDs with a short trail, live counts.

Why trails: an ID alone does not show a swap; a trail that jumps from one object to another
does, at a glance. Counting lines and zones carry their live counts next to them, as an
operator checking a camera's placement needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from edgefuse._cv import cv2
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.zone import Zone

LINE_COLOUR = (0, 215, 255)  # BGR amber: stands out over most scenes
ZONE_COLOUR = (255, 160, 0)


def draw_tracks(image: np.ndarray, ids: np.ndarray, boxes: np.ndarray,
                trails: Mapping[int, Sequence[tuple[float, float]]], colours: np.ndarray,
                width: int = 2) -> None:
    """Draw in place: each track's ID above its box and its trail of anchor points."""
    for track_id, box in zip(ids, boxes, strict=True):
        colour = tuple(int(c) for c in colours[int(track_id) % len(colours)])
        points = np.array(trails.get(int(track_id), ()), dtype=np.int32).reshape(-1, 1, 2)
        if len(points) > 1:
            cv2().polylines(image, [points], False, colour, width, cv2().LINE_AA)
        x1, y1 = int(box[0]), int(box[1])
        cv2().putText(image, f"#{int(track_id)}", (x1, max(y1 - 4, 12)), 0, 0.5, colour, 2,
                      cv2().LINE_AA)


def draw_lines(image: np.ndarray, lines: Sequence[LineCounter]) -> None:
    for line in lines:
        start = tuple(int(v) for v in line.start)
        end = tuple(int(v) for v in line.end)
        cv2().line(image, start, end, LINE_COLOUR, 2, cv2().LINE_AA)
        totals = line.totals()
        text = (f"{line.name}: in {sum(totals['in'].values())} "
                f"out {sum(totals['out'].values())}")
        cv2().putText(image, text, (start[0] + 4, start[1] - 6), 0, 0.5, LINE_COLOUR, 2,
                      cv2().LINE_AA)


def draw_zones(image: np.ndarray, zones: Sequence[Zone]) -> None:
    for zone in zones:
        points = zone.polygon.astype(np.int32).reshape(-1, 1, 2)
        cv2().polylines(image, [points], True, ZONE_COLOUR, 2, cv2().LINE_AA)
        x, y = (int(v) for v in zone.polygon.min(axis=0))
        text = f"{zone.name}: {sum(zone.occupancy().values())} now, {sum(zone.entries.values())} in"
        cv2().putText(image, text, (x + 4, y + 16), 0, 0.5, ZONE_COLOUR, 2, cv2().LINE_AA)
