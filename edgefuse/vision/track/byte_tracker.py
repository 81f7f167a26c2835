"""ByteTrack: every detection box joins a track, the low-score ones too, in two association rounds.

Follows ``yolox/tracker/byte_tracker.py`` (Zhang et al., "ByteTrack: Multi-Object Tracking by
Associating Every Detection Box", ECCV 2022) step by step:

1. detections above ``track_thresh`` are matched to the confirmed and lost tracks (Kalman
   predicted) on IoU fused with the detection score, cost ``1 - IoU * score``, Hungarian with
   the cost cut at ``match_thresh``; a lost track that matches is found again; the lost tracks
   still free then get a second chance at the high-score detections left, on buffered IoU
   (below);
2. the low-score detections (``low_thresh`` < score < ``track_thresh``: occluded or blurred
   objects) are matched to the tracks still unmatched, tracked or lost, on IoU (buffered for
   the lost ones), cut at 0.5; tracks still unmatched become lost;
3. the high-score detections left are matched to the unconfirmed tracks (seen once), cut at 0.7;
   unmatched unconfirmed tracks are removed;
4. the remaining detections scoring at least ``new_track_thresh`` start tracks (confirmed at once
   on the first frame only); tracks lost longer than ``track_buffer`` frames (at 30 fps, scaled
   with ``frame_rate``) are removed; a tracked and a lost track closer than IoU 0.85 keep only
   the older one.

Three changes from published successors, for objects that come back from behind another (each
one measured on both of ``bench.tracking``'s modes, figures in docs/apps.md):

- a lost track's box keeps its last size: its width and height velocities are zeroed (BoT-SORT's
  ``multi_predict``; ByteTrack zeroes only the height's), so a box that was shrinking as its
  object went behind another does not keep shrinking while unseen;
- a lost track the first round left free is matched again on buffered IoU (C-BIoU, Yang et al.,
  WACV 2023, whose cascade widens the boxes for what a tighter round left): its predicted box
  and each detection left are widened by ``lost_iou_buffer`` (0.3, the paper's first buffer) of
  their width and height on every side, as the prediction of an unseen object drifts from where
  it reappears. Only after the plain round, so a tracked track keeps the detection it overlaps
  (one round on buffered IoU for lost tracks lets them outbid it: bench.tracking's walkers,
  IDF1 0.952 -> 0.949), and only lost tracks, so dense crowds are matched as tightly as before;
  the low-score round sees lost tracks on the buffered IoU too;
- the low-score round offers its boxes to lost tracks too, as OC-SORT's BYTE association does
  (ByteTrack only to tracked ones): an object coming out from behind another is often detected
  with a low score first.

What differs, on purpose: removed tracks are forgotten (ByteTrack's ``removed_stracks`` list
grows for the life of the process: a leak on a camera that runs for months); IDs are counted per
tracker instance, not in a class attribute, so two cameras never share or skip IDs; each track
keeps the class of its last matched detection; the Kalman filter runs batched and keeps width
and height, not ByteTrack's aspect ratio, as BoT-SORT's does (``edgefuse.vision.track.kalman``:
why).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from edgefuse.metrics.detect import Detections, box_iou
from edgefuse.vision.track import kalman
from edgefuse.vision.track.assignment import linear_assignment

TRACKED, LOST = 1, 2


@dataclasses.dataclass
class Tracks:
    """The tracks confirmed on one frame: boxes xyxy [N, 4] (as detected), scores, classes, ids."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    ids: np.ndarray
    detection_index: np.ndarray  # which input detection each track took on this frame, -1: none

    def __len__(self) -> int:
        return len(self.ids)


@dataclasses.dataclass(frozen=True)
class TrackerOptions:
    """ByteTrack's parameters, with its defaults (MOT17 settings of the reference code)."""

    track_thresh: float = 0.5
    low_thresh: float = 0.1
    match_thresh: float = 0.8
    track_buffer: int = 30
    frame_rate: float = 30.0
    new_track_thresh: float | None = None  # default: track_thresh + 0.1, as ByteTrack's det_thresh
    lost_iou_buffer: float = 0.3  # C-BIoU's widening of lost tracks' boxes, a fraction of w, h

    def __post_init__(self) -> None:
        for name in ("track_thresh", "low_thresh", "match_thresh"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.low_thresh > self.track_thresh:
            raise ValueError(f"low_thresh {self.low_thresh} is above track_thresh "
                             f"{self.track_thresh}")
        if self.lost_iou_buffer < 0:
            raise ValueError(f"lost_iou_buffer must be >= 0, got {self.lost_iou_buffer}")
        if self.track_buffer < 0 or self.frame_rate <= 0:
            raise ValueError("track_buffer must be >= 0 and frame_rate > 0")


class ByteTracker:
    """One stream's tracker: ``update(detections)`` once per frame, in frame order.

    The tracks are rows of arrays (Kalman means and covariances, id, score, class, state), so a
    frame costs a fixed number of array operations whatever the number of objects.
    """

    def __init__(self, options: TrackerOptions | None = None) -> None:
        self.options = options or TrackerOptions()
        self.max_time_lost = int(self.options.frame_rate / 30.0 * self.options.track_buffer)
        self._frame = 0
        self._next_id = 1
        self._mean = np.zeros((0, 8))
        self._cov = np.zeros((0, 8, 8))
        self._ids = np.zeros(0, dtype=np.int64)
        self._scores = np.zeros(0)
        self._classes = np.zeros(0, dtype=np.int64)
        self._state = np.zeros(0, dtype=np.int8)
        self._confirmed = np.zeros(0, dtype=bool)
        self._last = np.zeros(0, dtype=np.int64)
        self._detection = np.zeros(0, dtype=np.int64)

    @property
    def live_tracks(self) -> int:
        """Tracks held in memory (tracked, unconfirmed and lost): bounded, see the module doc."""
        return len(self._ids)

    def rescale(self, scale_x: float, scale_y: float) -> None:
        """Every track's state in a frame scaled by ``scale_x``, ``scale_y`` (a camera that
        switched resolution): the tracks, their IDs and their motion go on at the new size."""
        factors = np.array([scale_x, scale_y] * 4)
        self._mean = self._mean * factors
        self._cov = self._cov * factors[:, None] * factors[None, :]

    def update(self, detections: Detections) -> Tracks:
        opts = self.options
        self._frame += 1
        boxes = np.asarray(detections.boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(detections.scores, dtype=np.float64).reshape(-1)
        classes = np.asarray(detections.classes).reshape(-1).astype(np.int64)
        self._detection[:] = -1
        high = np.flatnonzero(scores > opts.track_thresh)
        low = np.flatnonzero((scores > opts.low_thresh) & (scores < opts.track_thresh))

        # a lost track's size stops changing (BoT-SORT's multi_predict), then all predict
        self._mean[self._state != TRACKED, 6:8] = 0.0
        self._mean, self._cov = kalman.predict(self._mean, self._cov)
        predicted = kalman.xywh_to_xyxy(self._mean)
        iou = box_iou(predicted, boxes)
        confirmed = np.flatnonzero(self._confirmed)
        unconfirmed = np.flatnonzero(~self._confirmed)

        # 1. high-score detections against confirmed tracks, tracked or lost
        cost = 1.0 - iou[np.ix_(confirmed, high)] * scores[high]
        matches, free_tracks, free_high = linear_assignment(cost, opts.match_thresh)
        self._apply(confirmed[matches[:, 0]], high[matches[:, 1]], scores, classes)
        remaining = confirmed[free_tracks]
        lost = remaining[self._state[remaining] == LOST]
        left = high[free_high]
        if len(lost) and (len(left) or len(low)) and opts.lost_iou_buffer > 0:
            # 1b. the lost tracks still free against the high-score detections left, on IoU
            # buffered (C-BIoU's cascade: a wider buffer for what the tighter round left)
            iou[lost] = box_iou(buffered(predicted[lost], opts.lost_iou_buffer),
                                buffered(boxes, opts.lost_iou_buffer))
            cost = 1.0 - iou[np.ix_(lost, left)] * scores[left]
            matches, _, free_left = linear_assignment(cost, opts.match_thresh)
            if len(matches):
                self._apply(lost[matches[:, 0]], left[matches[:, 1]], scores, classes)
                free_high = free_high[free_left]
                remaining = remaining[self._detection[remaining] < 0]
        # 2. low-score detections against the tracks still free, tracked or lost (OC-SORT)
        matches, free_remaining, _ = linear_assignment(1.0 - iou[np.ix_(remaining, low)], 0.5)
        self._apply(remaining[matches[:, 0]], low[matches[:, 1]], scores, classes)
        self._state[remaining[free_remaining]] = LOST
        # 3. high-score detections left against unconfirmed tracks
        left = high[free_high]
        cost = 1.0 - iou[np.ix_(unconfirmed, left)] * scores[left]
        matches, free_unconfirmed, free_left = linear_assignment(cost, 0.7)
        self._apply(unconfirmed[matches[:, 0]], left[matches[:, 1]], scores, classes)
        # every round matched against the predictions: one Kalman correction for all of them
        self._correct(boxes)
        # 4. forget removed and long-lost tracks, start new ones, drop duplicates
        keep = np.ones(len(self._ids), dtype=bool)
        keep[unconfirmed[free_unconfirmed]] = False
        keep &= ~((self._state == LOST) & (self._frame - self._last > self.max_time_lost))
        self._select(keep)
        threshold = opts.new_track_thresh
        threshold = opts.track_thresh + 0.1 if threshold is None else threshold
        new = left[free_left]
        self._start(new[scores[new] >= threshold], boxes, scores, classes)
        self._drop_duplicates()
        shown = (self._state == TRACKED) & self._confirmed
        # every shown track took a detection on this frame: report the box the detector saw
        # (the Kalman state is for association; its smoothing cost 0.05 HOTA
        # on bench.tracking's walkers, as trackers' and supervision's outputs show)
        shown_boxes = kalman.xywh_to_xyxy(self._mean[shown])
        matched = self._detection[shown] >= 0
        shown_boxes[matched] = boxes[self._detection[shown][matched]]
        return Tracks(
            boxes=shown_boxes.astype(np.float32).reshape(-1, 4),
            scores=self._scores[shown].astype(np.float32), classes=self._classes[shown],
            ids=self._ids[shown], detection_index=self._detection[shown])

    def _apply(self, tracks: np.ndarray, rows: np.ndarray, scores: np.ndarray,
               classes: np.ndarray) -> None:
        self._scores[tracks], self._classes[tracks] = scores[rows], classes[rows]
        self._state[tracks], self._confirmed[tracks] = TRACKED, True
        self._last[tracks], self._detection[tracks] = self._frame, rows

    def _correct(self, boxes: np.ndarray) -> None:
        tracks = np.flatnonzero(self._detection >= 0)
        if len(tracks) == 0:
            return
        self._mean[tracks], self._cov[tracks] = kalman.update(
            self._mean[tracks], self._cov[tracks],
            kalman.xyxy_to_xywh(boxes[self._detection[tracks]]))

    def _start(self, rows: np.ndarray, boxes: np.ndarray, scores: np.ndarray,
               classes: np.ndarray) -> None:
        count = len(rows)
        if count == 0:
            return
        mean, cov = kalman.initiate(kalman.xyxy_to_xywh(boxes[rows]))
        self._mean = np.concatenate([self._mean, mean])
        self._cov = np.concatenate([self._cov, cov])
        self._ids = np.concatenate([self._ids, self._next_id + np.arange(count)])
        self._next_id += count
        self._scores = np.concatenate([self._scores, scores[rows]])
        self._classes = np.concatenate([self._classes, classes[rows]])
        self._state = np.concatenate([self._state, np.full(count, TRACKED, dtype=np.int8)])
        self._confirmed = np.concatenate([self._confirmed, np.full(count, self._frame == 1)])
        self._last = np.concatenate([self._last, np.full(count, self._frame)])
        self._detection = np.concatenate([self._detection, rows.astype(np.int64)])

    def _select(self, keep: np.ndarray) -> None:
        for name in ("_mean", "_cov", "_ids", "_scores", "_classes", "_state", "_confirmed",
                     "_last", "_detection"):
            setattr(self, name, getattr(self, name)[keep])

    def _drop_duplicates(self) -> None:
        tracked = np.flatnonzero(self._state == TRACKED)
        lost = np.flatnonzero(self._state == LOST)
        if len(tracked) == 0 or len(lost) == 0:
            return
        corners = kalman.xywh_to_xyxy(self._mean)
        pairs = np.argwhere(box_iou(corners[tracked], corners[lost]) > 0.85)
        if len(pairs) == 0:
            return
        first, second = tracked[pairs[:, 0]], lost[pairs[:, 1]]
        # the younger of each pair goes: a lower ID is an older track
        younger = np.where(self._ids[first] > self._ids[second], first, second)
        keep = np.ones(len(self._ids), dtype=bool)
        keep[younger] = False
        self._select(keep)


def buffered(boxes: np.ndarray, ratio: float | np.ndarray) -> np.ndarray:
    """xyxy boxes widened by ``ratio`` (a number, or one per box as [N, 1]) of their width and
    height on every side: C-BIoU's buffer, a w x h box becomes (1 + 2 ratio) w x (1 + 2 ratio) h
    about the same centre."""
    size = boxes[:, 2:] - boxes[:, :2]
    return boxes + ratio * np.concatenate([-size, size], axis=1)
