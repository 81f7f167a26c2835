"""Tracks, counting lines and zones drawn over a frame: trails, named lines and zones, a counts
panel.

Why trails: an ID alone does not show a swap; a trail that jumps from one object to another
does, at a glance. Why the counts go to a panel in the top-right corner and not next to the
lines: text on a counting line is exactly where the objects being counted cross, so boxes and
labels run over it (``mi#1dle: in 1 out 2``). The line or zone itself carries only its name, on
a tag placed like an object's label (kept off the panel, and the objects' labels kept off it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from edgefuse._cv import cv2
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.zone import Zone
from edgefuse.vision.draw.labels import LabelPlacer
from edgefuse.vision.draw.panel import Row
from edgefuse.vision.draw.text import Rect, TextStyle, line_width

LINE_COLOUR = (0, 215, 255)  # BGR amber: stands out over most scenes
ZONE_COLOUR = (255, 160, 0)  # BGR azure
Tag = tuple[str, Rect, tuple[int, int, int]]  # name, where, BGR colour


def draw_trails(image: np.ndarray, ids: np.ndarray,
                trails: Mapping[int, Sequence[tuple[float, float]]], colours: np.ndarray) -> None:
    """Draw in place each track's trail of anchor points, in its ID's colour."""
    width = max(line_width(*image.shape[:2]) - 1, 1)
    for track_id in ids:
        points = np.array(trails.get(int(track_id), ()), dtype=np.int32).reshape(-1, 1, 2)
        if len(points) > 1:
            colour = tuple(int(c) for c in colours[int(track_id) % len(colours)])
            cv2().polylines(image, [points], False, colour, width, cv2().LINE_AA)


def draw_lines(image: np.ndarray, lines: Sequence[LineCounter]) -> None:
    """Draw each counting line in place (its name goes on a tag: ``place_tags``)."""
    width = line_width(*image.shape[:2])
    for line in lines:
        start = tuple(int(v) for v in line.start)
        end = tuple(int(v) for v in line.end)
        cv2().line(image, start, end, LINE_COLOUR, width, cv2().LINE_AA)


def draw_zones(image: np.ndarray, zones: Sequence[Zone]) -> None:
    """Draw each zone's outline in place (its name goes on a tag: ``place_tags``)."""
    width = line_width(*image.shape[:2])
    for zone in zones:
        points = zone.polygon.astype(np.int32).reshape(-1, 1, 2)
        cv2().polylines(image, [points], True, ZONE_COLOUR, width, cv2().LINE_AA)


def place_tags(shape: Sequence[int], lines: Sequence[LineCounter], zones: Sequence[Zone],
               placer: LabelPlacer, style: TextStyle) -> list[Tag]:
    """A name tag per line (at its start) and zone (at its top-left corner), placed before the
    objects' labels so that they keep clear of it; drawn last (``draw_tags``), over the boxes."""
    tags: list[Tag] = []
    anchors = [(line.name, line.start, LINE_COLOUR) for line in lines]
    anchors += [(zone.name, zone.polygon.min(axis=0), ZONE_COLOUR) for zone in zones]
    for name, point, colour in anchors:
        x, y = _inside(tuple(int(v) for v in point), shape)
        rect = placer.place(style.size(name), (x, y, x, y))
        if rect is not None:
            tags.append((name, rect, colour))
    return tags


def draw_tags(image: np.ndarray, tags: Sequence[Tag], style: TextStyle) -> None:
    for name, rect, colour in tags:
        style.draw(image, name, rect, colour)


def count_rows(lines: Sequence[LineCounter], zones: Sequence[Zone]) -> list[Row]:
    """The counts panel's rows: ``door: in 3 out 2`` per line, ``dock: 2 now, 5 entered`` per
    zone, each with its line's or zone's colour."""
    rows: list[Row] = []
    for line in lines:
        totals = line.totals()
        rows.append((f"{line.name}: in {sum(totals['in'].values())} "
                     f"out {sum(totals['out'].values())}", LINE_COLOUR))
    for zone in zones:
        rows.append((f"{zone.name}: {sum(zone.occupancy().values())} now, "
                     f"{sum(zone.entries.values())} entered", ZONE_COLOUR))
    return rows


def _inside(point: tuple[int, ...], shape: Sequence[int]) -> tuple[int, int]:
    height, width = shape[:2]
    return min(max(point[0], 0), width - 1), min(max(point[1], 0), height - 1)
