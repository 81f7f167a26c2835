"""ByteTrack: every detection box joins a track, the low-score ones too, in two association rounds.

Follows ``yolox/tracker/byte_tracker.py`` (Zhang et al., "ByteTrack: Multi-Object Tracking by
Associating Every Detection Box", ECCV 2022) step by step:

1. detections above ``track_thresh`` are matched to the confirmed and lost tracks (Kalman
   predicted) on IoU fused with the detection score, cost ``1 - IoU * score``, Hungarian with
   the cost cut at ``match_thresh``; a lost track that matches is found again;
2. the low-score detections (``low_thresh`` < score < ``track_thresh``: occluded or blurred
   objects) are matched to the tracks still unmatched on plain IoU, cut at 0.5; tracks still
   unmatched become lost;
3. the high-score detections left are matched to the unconfirmed tracks (seen once), cut at 0.7;
   unmatched unconfirmed tracks are removed;
4. the remaining detections scoring at least ``new_track_thresh`` start tracks (confirmed at once
   on the first frame only); tracks lost longer than ``track_buffer`` frames (at 30 fps, scaled
   with ``frame_rate``) are removed; a tracked and a lost track closer than IoU 0.85 keep only
   the older one.

What differs, on purpose: removed tracks are forgotten (ByteTrack's ``removed_stracks`` list
grows for the life of the process: a leak on a camera that runs for months); IDs are counted per
tracker instance, not in a class attribute, so two cameras never share or skip IDs; each track
keeps the class of its last matched detection; the Kalman filter runs batched
(``edgefuse.vision.track.kalman``).
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
    """The tracks confirmed on one frame: boxes xyxy [N, 4] (filtered), scores, classes, ids."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    ids: np.ndarray
    detection_index: np.ndarray  # which input detection each track took on this frame, -1: none

    def __len__(self) -> int:
        return len(self.ids)


@dataclasses.dataclass
class _Track:
    track_id: int
    mean: np.ndarray
    covariance: np.ndarray
    score: float
    class_id: int
    state: int = TRACKED
    confirmed: bool = False
    last_frame: int = 0
    detection: int = -1


@dataclasses.dataclass(frozen=True)
class TrackerOptions:
    """ByteTrack's parameters, with its defaults (MOT17 settings of the reference code)."""

    track_thresh: float = 0.5
    low_thresh: float = 0.1
    match_thresh: float = 0.8
    track_buffer: int = 30
    frame_rate: float = 30.0
    new_track_thresh: float | None = None  # default: track_thresh + 0.1, as ByteTrack's det_thresh

    def __post_init__(self) -> None:
        for name in ("track_thresh", "low_thresh", "match_thresh"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.low_thresh > self.track_thresh:
            raise ValueError(f"low_thresh {self.low_thresh} is above track_thresh "
                             f"{self.track_thresh}")
        if self.track_buffer < 0 or self.frame_rate <= 0:
            raise ValueError("track_buffer must be >= 0 and frame_rate > 0")


class ByteTracker:
    """One stream's tracker: ``update(detections)`` once per frame, in frame order."""

    def __init__(self, options: TrackerOptions | None = None) -> None:
        self.options = options or TrackerOptions()
        self._tracks: list[_Track] = []
        self._frame = 0
        self._next_id = 1
        self.max_time_lost = int(self.options.frame_rate / 30.0 * self.options.track_buffer)

    @property
    def live_tracks(self) -> int:
        """Tracks held in memory (tracked, unconfirmed and lost): bounded, see the module doc."""
        return len(self._tracks)

    def update(self, detections: Detections) -> Tracks:
        opts = self.options
        self._frame += 1
        boxes = np.asarray(detections.boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(detections.scores, dtype=np.float64).reshape(-1)
        classes = np.asarray(detections.classes).reshape(-1).astype(np.int64)
        for track in self._tracks:
            track.detection = -1
        high = np.flatnonzero(scores > opts.track_thresh)
        low = np.flatnonzero((scores > opts.low_thresh) & (scores < opts.track_thresh))

        confirmed = [t for t in self._tracks if t.confirmed]
        unconfirmed = [t for t in self._tracks if not t.confirmed]
        self._predict(self._tracks)

        # 1. high-score detections against confirmed tracks, tracked or lost
        cost = _fused_cost(confirmed, boxes[high], scores[high])
        matches, free_tracks, free_high = linear_assignment(cost, opts.match_thresh)
        self._apply(confirmed, matches, high, boxes, scores, classes)
        # 2. low-score detections against the tracked ones still free
        remaining = [confirmed[i] for i in free_tracks if confirmed[i].state == TRACKED]
        cost = 1.0 - _iou(remaining, boxes[low])
        matches, free_remaining, _ = linear_assignment(cost, 0.5)
        self._apply(remaining, matches, low, boxes, scores, classes)
        for i in free_remaining:
            remaining[i].state = LOST
        # 3. high-score detections left against unconfirmed tracks
        left = high[free_high]
        cost = _fused_cost(unconfirmed, boxes[left], scores[left])
        matches, free_unconfirmed, free_left = linear_assignment(cost, 0.7)
        self._apply(unconfirmed, matches, left, boxes, scores, classes)
        removed = {id(unconfirmed[i]) for i in free_unconfirmed}
        # 4. new tracks, then forget what is gone
        threshold = opts.new_track_thresh
        threshold = opts.track_thresh + 0.1 if threshold is None else threshold
        new = [i for i in left[free_left] if scores[i] >= threshold]
        self._tracks = [t for t in self._tracks if id(t) not in removed
                        and not (t.state == LOST
                                 and self._frame - t.last_frame > self.max_time_lost)]
        self._start(new, boxes, scores, classes)
        self._drop_duplicates()
        shown = [t for t in self._tracks if t.state == TRACKED and t.confirmed]
        return _as_tracks(shown)

    def _predict(self, tracks: list[_Track]) -> None:
        if not tracks:
            return
        mean = np.stack([t.mean for t in tracks])
        for track, row in zip(tracks, mean, strict=True):
            if track.state != TRACKED:
                row[7] = 0.0  # a lost track's height stops changing (ByteTrack's multi_predict)
        mean, covariance = kalman.predict(mean, np.stack([t.covariance for t in tracks]))
        for track, m, c in zip(tracks, mean, covariance, strict=True):
            track.mean, track.covariance = m, c

    def _apply(self, tracks: list[_Track], matches: np.ndarray, rows: np.ndarray,
               boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> None:
        if len(matches) == 0:
            return
        chosen = [tracks[t] for t in matches[:, 0]]
        detections = rows[matches[:, 1]]
        mean, covariance = kalman.update(
            np.stack([t.mean for t in chosen]), np.stack([t.covariance for t in chosen]),
            kalman.xyxy_to_xyah(boxes[detections]))
        for track, m, c, d in zip(chosen, mean, covariance, detections, strict=True):
            track.mean, track.covariance = m, c
            track.score, track.class_id = float(scores[d]), int(classes[d])
            track.state, track.confirmed = TRACKED, True
            track.last_frame, track.detection = self._frame, int(d)

    def _start(self, rows: list[int], boxes: np.ndarray, scores: np.ndarray,
               classes: np.ndarray) -> None:
        if not rows:
            return
        mean, covariance = kalman.initiate(kalman.xyxy_to_xyah(boxes[rows]))
        for d, m, c in zip(rows, mean, covariance, strict=True):
            self._tracks.append(_Track(
                self._next_id, m, c, float(scores[d]), int(classes[d]),
                confirmed=self._frame == 1, last_frame=self._frame, detection=int(d)))
            self._next_id += 1

    def _drop_duplicates(self) -> None:
        tracked = [t for t in self._tracks if t.state == TRACKED]
        lost = [t for t in self._tracks if t.state == LOST]
        if not tracked or not lost:
            return
        overlap = _iou(tracked, _boxes(lost)) > 0.85
        dropped = set()
        for i, j in zip(*np.nonzero(overlap), strict=True):
            # the younger of the two goes: a lower ID is an older track
            older, younger = sorted((tracked[i], lost[j]), key=lambda t: t.track_id)
            dropped.add(id(younger))
        self._tracks = [t for t in self._tracks if id(t) not in dropped]


def _boxes(tracks: list[_Track]) -> np.ndarray:
    if not tracks:
        return np.zeros((0, 4))
    return kalman.xyah_to_xyxy(np.stack([t.mean for t in tracks]))


def _iou(tracks: list[_Track], boxes: np.ndarray) -> np.ndarray:
    return box_iou(_boxes(tracks), boxes)


def _fused_cost(tracks: list[_Track], boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    return 1.0 - _iou(tracks, boxes) * scores[None, :]


def _as_tracks(tracks: list[_Track]) -> Tracks:
    return Tracks(
        boxes=_boxes(tracks).astype(np.float32),
        scores=np.array([t.score for t in tracks], dtype=np.float32),
        classes=np.array([t.class_id for t in tracks], dtype=np.int64),
        ids=np.array([t.track_id for t in tracks], dtype=np.int64),
        detection_index=np.array([t.detection for t in tracks], dtype=np.int64))
