"""Recognising a constant that acts per channel (axis 1) on an N-D tensor.

Why a shared check: folding ``y * c`` or ``y + c`` into a Conv is exact only when ``c`` varies at
most along the channel axis and does not broadcast ``y`` to a larger shape; a constant of shape
``[1, C, 1, 1]``, ``[C, 1, 1]``, ``[1]`` or a scalar qualifies, ``[C]`` on a 4-D tensor does not
(it broadcasts along the width).
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult


def channel_vector(
    result: MatchResult, constant: np.ndarray, rank: int, channels: int
) -> np.ndarray | None:
    """``constant`` as a float64 vector of ``channels`` values, or None with the reason set."""
    if constant.ndim > rank:
        result.fail(
            f"constant of shape {constant.shape} would broadcast the output to rank {constant.ndim}"
        )
        return None
    padded = (1,) * (rank - constant.ndim) + tuple(constant.shape)
    for axis, size in enumerate(padded):
        if axis != 1 and size != 1:
            result.fail(
                f"constant of shape {constant.shape} is not per-channel (axis {axis} is {size})"
            )
            return None
    if padded[1] not in (1, channels):
        result.fail(f"constant has {padded[1]} channels, the tensor has {channels}")
        return None
    return np.broadcast_to(constant.reshape(-1).astype(np.float64), (channels,)).copy()
