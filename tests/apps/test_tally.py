"""The summary's last line: what a stream counted (``Tally``), from results whose counts are
known."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from edgefuse.apps.tally import Tally
from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.task import TrackedResult
from edgefuse.vision.segment.decode import Segmentation
from edgefuse.vision.streams.frames import Frame, FrameResult
from edgefuse.vision.track.byte_tracker import Tracks

pytestmark = pytest.mark.unit
NAMES = ("person", "cart")


def _frame(result):
    return FrameResult(Frame(0, np.zeros((1, 1, 3), np.uint8), 0.0, 0.0), result=result)


def _tracks(ids, classes):
    count = len(ids)
    return Tracks(np.zeros((count, 4), np.float32), np.ones(count, np.float32),
                  np.array(classes, np.int64), np.array(ids, np.int64), np.arange(count))


def test_tracks_are_counted_once_each_with_the_last_line_and_zone_counts():
    tally = Tally(NAMES)
    detections = Detections(np.zeros((3, 4), np.float32), np.ones(3), np.array([0, 0, 1]))
    counts = {"lines": {"door": {"in": {"person": 2}, "out": {"cart": 1}}},
              "zones": {"dock": {"occupancy": {"cart": 1}, "entries": {"cart": 4},
                                 "exits": {"cart": 3}}}}
    frames = [_tracks([1, 2], [0, 1]), _tracks([1, 2, 3], [0, 1, 0]), _tracks([3, 5], [0, 1])]
    for tracks in frames:
        tally.write(_frame(TrackedResult(detections, tracks, [], counts)), None)
    assert tally.tracks == collections.Counter(person=2, cart=2)  # IDs 1, 2, 3, 5
    assert tally.line() == ("door in 2 out 1; dock 4 entered, 1 now; "
                            "4 tracks (cart 2, person 2)")


def test_detections_without_tracking_and_a_class_map_that_counts_no_objects():
    plain = Tally(NAMES)
    for classes in ([0, 1, 1], [1]):
        plain.write(_frame(Detections(np.zeros((len(classes), 4)), np.ones(len(classes)),
                                      np.array(classes))), None)
    assert plain.line() == "4 detections in 2 frames (cart 3, person 1)"
    semantic = Tally(("background", "road"))
    semantic.write(_frame(Segmentation(np.zeros((4, 4), np.uint8), 2)), None)
    assert semantic.line() == ""
