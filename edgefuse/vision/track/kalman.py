"""A constant-velocity Kalman filter over boxes, batched over every track of a frame.

Why this parametrisation: it is SORT/DeepSORT/ByteTrack's (``yolox/tracker/kalman_filter.py``),
whose noise scales the published HOTA/IDF1 figures were tuned with. The state is
``(cx, cy, a, h, vcx, vcy, va, vh)`` with ``a = w / h``; process and measurement noise are
proportional to the box height (``1/20`` of it for position, ``1/160`` for velocity), so a near,
large box is allowed to move more pixels than a far, small one.

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
_PROJECT = np.eye(4, 8)


def xyxy_to_xyah(boxes: np.ndarray) -> np.ndarray:
    """[N, 4] corner boxes to (centre x, centre y, aspect w/h, height)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    width = boxes[:, 2] - boxes[:, 0]
    height = np.maximum(boxes[:, 3] - boxes[:, 1], 1e-6)
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2,
                     width / height, height], axis=1)


def xyah_to_xyxy(state: np.ndarray) -> np.ndarray:
    """The box part of [N, >=4] states back to corners."""
    cx, cy, aspect, height = (state[:, i] for i in range(4))
    width = aspect * height
    return np.stack([cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2], axis=1)


def initiate(measurements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means and covariances of new tracks from [N, 4] xyah measurements (velocity unknown)."""
    count = len(measurements)
    mean = np.concatenate([measurements, np.zeros((count, 4))], axis=1)
    height = measurements[:, 3]
    std = np.stack([2 * POSITION_WEIGHT * height, 2 * POSITION_WEIGHT * height,
                    np.full(count, 1e-2), 2 * POSITION_WEIGHT * height,
                    10 * VELOCITY_WEIGHT * height, 10 * VELOCITY_WEIGHT * height,
                    np.full(count, 1e-5), 10 * VELOCITY_WEIGHT * height], axis=1)
    return mean, _diagonal(std**2)


def predict(mean: np.ndarray, covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One frame ahead for every track."""
    if len(mean) == 0:
        return mean, covariance
    height = mean[:, 3]
    std = np.stack([POSITION_WEIGHT * height, POSITION_WEIGHT * height,
                    np.full(len(mean), 1e-2), POSITION_WEIGHT * height,
                    VELOCITY_WEIGHT * height, VELOCITY_WEIGHT * height,
                    np.full(len(mean), 1e-5), VELOCITY_WEIGHT * height], axis=1)
    mean = mean @ _MOTION.T
    covariance = _MOTION @ covariance @ _MOTION.T + _diagonal(std**2)
    return mean, covariance


def update(mean: np.ndarray, covariance: np.ndarray,
           measurements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct each track's state with its matched [N, 4] xyah measurement."""
    if len(mean) == 0:
        return mean, covariance
    height = mean[:, 3]
    std = np.stack([POSITION_WEIGHT * height, POSITION_WEIGHT * height,
                    np.full(len(mean), 1e-1), POSITION_WEIGHT * height], axis=1)
    projected_mean = mean[:, :4]
    projected_cov = covariance[:, :4, :4] + _diagonal(std**2)
    # K = P H^T S^-1, solved rather than inverted: S K^T = H P
    gain = np.linalg.solve(projected_cov, covariance[:, :4, :]).transpose(0, 2, 1)
    innovation = measurements - projected_mean
    mean = mean + np.einsum("nij,nj->ni", gain, innovation)
    covariance = covariance - gain @ projected_cov @ gain.transpose(0, 2, 1)
    return mean, covariance


def _diagonal(values: np.ndarray) -> np.ndarray:
    out = np.zeros(values.shape + values.shape[-1:])
    index = np.arange(values.shape[-1])
    out[..., index, index] = values
    return out
