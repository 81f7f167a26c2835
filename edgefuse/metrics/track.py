"""Tracking and counting scored against identities: IDF1, MOTA, ID switches, true line crossings.

Why our own and not TrackEval: the benchmark (``bench/tracking.py``) quotes TrackEval's HOTA, but
TrackEval is an optional bench dependency, and the demo and the tests need the tracking scores
everywhere the tracker runs. These follow TrackEval's definitions at one IoU threshold:

- CLEAR MOT: per frame, ground-truth and predicted boxes are matched one to one by IoU (at least
  ``threshold``), a pair matched on the frame before kept before any other (TrackEval's 1000 bonus);
  an ID switch is a ground-truth object matched to another prediction ID than the one it was last
  matched to. MOTA = 1 - (misses + false positives + ID switches) / ground-truth boxes.
- Identity (IDF1): each ground-truth ID is matched to at most one prediction ID over the whole
  sequence, to maximise the frames where the two overlap by ``threshold`` (IDTP);
  IDF1 = 2 IDTP / (ground-truth boxes + predicted boxes).

True crossings are what a counting line should count: each identity's anchor path (bottom centre
of its box, the counters' default anchor) taken from the labels, one crossing each time it goes
from one side of the line to the other through the segment, with the direction convention of
``edgefuse.vision.analytics.line`` (``in``: from the left-hand to the right-hand side looking from
``start`` to ``end``, y down).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from edgefuse._deps import require
from edgefuse.metrics.detect import box_iou

_KEEP_BONUS = 1000.0


@dataclasses.dataclass(frozen=True)
class TrackFrame:
    """The objects of one frame: identities [K] and boxes xyxy [K, 4]."""

    ids: np.ndarray
    boxes: np.ndarray


@dataclasses.dataclass(frozen=True)
class TrackScores:
    idf1: float
    mota: float
    id_switches: int
    misses: int
    false_positives: int
    truth_boxes: int


def score_tracks(truth: Sequence[TrackFrame], predicted: Sequence[TrackFrame],
                 threshold: float = 0.5) -> TrackScores:
    """CLEAR MOT and identity scores of ``predicted`` against ``truth``, frame by frame."""
    if len(truth) != len(predicted):
        raise ValueError(f"{len(truth)} truth frames but {len(predicted)} predicted frames")
    optimize = require("scipy.optimize", extra="vision", purpose="tracking scores")
    truth_ids = _index(truth)
    predicted_ids = _index(predicted)
    overlaps = np.zeros((len(truth_ids), len(predicted_ids)))
    last_match: dict[int, int] = {}  # truth ID -> prediction ID it was last matched to
    previous: dict[int, int] = {}  # the same, on the frame before only
    misses = false_positives = switches = 0
    for gt, pred in zip(truth, predicted, strict=True):
        iou = box_iou(gt.boxes, pred.boxes)
        close = iou >= threshold
        rows, cols = np.nonzero(close)
        for row, col in zip(rows, cols, strict=True):
            overlaps[truth_ids[int(gt.ids[row])], predicted_ids[int(pred.ids[col])]] += 1
        kept = np.array([[previous.get(int(g)) == int(p) for p in pred.ids] for g in gt.ids],
                        dtype=bool).reshape(close.shape)
        score = np.where(close, iou + _KEEP_BONUS * kept, 0.0)
        matched = {}
        if score.size:
            for row, col in zip(*optimize.linear_sum_assignment(score, maximize=True),
                                strict=True):
                if score[row, col] > 0:
                    matched[int(gt.ids[row])] = int(pred.ids[col])
        for g, p in matched.items():
            switches += g in last_match and last_match[g] != p
            last_match[g] = p
        previous = matched
        misses += len(gt.ids) - len(matched)
        false_positives += len(pred.ids) - len(matched)
    truth_boxes = sum(len(frame.ids) for frame in truth)
    predicted_boxes = sum(len(frame.ids) for frame in predicted)
    identity_tp = 0.0
    if overlaps.size:
        rows, cols = optimize.linear_sum_assignment(overlaps, maximize=True)
        identity_tp = float(overlaps[rows, cols].sum())
    boxes = truth_boxes + predicted_boxes
    return TrackScores(
        idf1=2 * identity_tp / boxes if boxes else 1.0,
        mota=1.0 - (misses + false_positives + switches) / truth_boxes if truth_boxes else
        float("nan"),
        id_switches=switches, misses=misses, false_positives=false_positives,
        truth_boxes=truth_boxes)


def line_crossings(truth: Sequence[TrackFrame], start: tuple[float, float],
                   end: tuple[float, float]) -> dict[str, int]:
    """How often the labelled objects' anchors cross the segment ``start`` -> ``end``, each way."""
    start_point, end_point = np.asarray(start, np.float64), np.asarray(end, np.float64)
    length = float(np.hypot(*(end_point - start_point)))
    direction = (end_point - start_point) / length
    last: dict[int, tuple[np.ndarray, float]] = {}  # ID -> (anchor, signed distance) off the line
    counts = {"in": 0, "out": 0}
    for frame in truth:
        for object_id, box in zip(frame.ids, np.asarray(frame.boxes, np.float64), strict=True):
            point = np.array([(box[0] + box[2]) / 2, box[3]])
            offset = point - start_point
            side = float(direction[0] * offset[1] - direction[1] * offset[0])
            if side == 0.0:
                continue
            before = last.get(int(object_id))
            last[int(object_id)] = (point, side)
            if before is None or (before[1] > 0) == (side > 0):
                continue
            crossing = before[0] + before[1] / (before[1] - side) * (point - before[0])
            if 0.0 <= float(np.dot(crossing - start_point, direction)) <= length:
                counts["in" if side > 0 else "out"] += 1
    return counts


def _index(frames: Sequence[TrackFrame]) -> dict[int, int]:
    ids = sorted({int(i) for frame in frames for i in frame.ids})
    return {object_id: k for k, object_id in enumerate(ids)}
