"""A constant-velocity Kalman filter over boxes, batched over every track of a frame.

Why this parametrisation: BoT-SORT's ``KalmanFilterXYWH`` (Aharon et al. 2022, the filter
Ultralytics' trackers run), with ByteTrack's noise scales. The state is
``(cx, cy, w, h, vcx, vcy, vw, vh)``; process and measurement noise are proportional to the box
size (``1/20`` of the width or height for position, ``1/160`` for velocity), so a near, large box
is allowed to move more pixels than a far, small one. ByteTrack's own filter keeps the aspect
ratio ``w / h`` with a fixed, tiny noise instead of the width: it cannot follow a box whose shape
changes fast, as every box does while its object enters or leaves through a border (cut by the
frame edge), and on ``bench.tracking``'s walkers that costs about 10 ID switches in 600 frames
where paths cross near the borders (docs/apps.md, tracking).

Why batched: ByteTrack predicts all tracks at once but updates them one by one in Python; at 50
objects that loop alone costs about a millisecond on a small CPU. Here predict and update are one
set of array operations over the tracks of a frame (``[N, 8]`` means, ``[N, 8, 8]`` covariances).
"""

from __future__ import annotations

import numpy as np

POSITION_WEIGHT = 1.0 / 20.0
VELOCITY_WEIGHT = 1.0 / 160.0
_MOTION = np.eye(8)
_MOTION[:4, 4:] = np.eye(4)  # x' = x + v (one frame)


def xyxy_to_xywh(boxes: np.ndarray) -> np.ndarray:
    """[N, 4] corner boxes to (centre x, centre y, width, height)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2,
                     np.maximum(boxes[:, 2] - boxes[:, 0], 1e-6),
                     np.maximum(boxes[:, 3] - boxes[:, 1], 1e-6)], axis=1)


def xywh_to_xyxy(state: np.ndarray) -> np.ndarray:
    """The box part of [N, >=4] states back to corners."""
    cx, cy, width, height = (state[:, i] for i in range(4))
    return np.stack([cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2], axis=1)


def initiate(measurements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means and covariances of new tracks from [N, 4] xywh measurements (velocity unknown)."""
    mean = np.concatenate([measurements, np.zeros_like(measurements)], axis=1)
    sizes = _sizes(measurements)
    std = np.concatenate([2 * POSITION_WEIGHT * sizes, 10 * VELOCITY_WEIGHT * sizes], axis=1)
    return mean, _diagonal(std**2)


def predict(mean: np.ndarray, covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One frame ahead for every track."""
    if len(mean) == 0:
        return mean, covariance
    sizes = _sizes(mean)
    std = np.concatenate([POSITION_WEIGHT * sizes, VELOCITY_WEIGHT * sizes], axis=1)
    mean = mean @ _MOTION.T
    covariance = _MOTION @ covariance @ _MOTION.T + _diagonal(std**2)
    return mean, covariance


def update(mean: np.ndarray, covariance: np.ndarray,
           measurements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct each track's state with its matched [N, 4] xywh measurement."""
    if len(mean) == 0:
        return mean, covariance
    std = POSITION_WEIGHT * _sizes(mean)
    projected_mean = mean[:, :4]
    projected_cov = covariance[:, :4, :4] + _diagonal(std**2)
    # K = P H^T S^-1, solved rather than inverted: S K^T = H P
    gain = np.linalg.solve(projected_cov, covariance[:, :4, :]).transpose(0, 2, 1)
    innovation = measurements - projected_mean
    mean = mean + np.einsum("nij,nj->ni", gain, innovation)
    covariance = covariance - gain @ projected_cov @ gain.transpose(0, 2, 1)
    return mean, covariance


def _sizes(state: np.ndarray) -> np.ndarray:
    """[N, 4] (w, h, w, h): the scale of each of the four box coordinates' noise."""
    return np.tile(state[:, 2:4], 2)


def _diagonal(values: np.ndarray) -> np.ndarray:
    out = np.zeros(values.shape + values.shape[-1:])
    index = np.arange(values.shape[-1])
    out[..., index, index] = values
    return out
