"""Minimum-cost matching of tracks to detections, with a cost limit.

The same problem as ByteTrack's ``matching.linear_assignment``, ``lap.lapjv(cost,
extend_cost=True, cost_limit=threshold)``: lap extends the ``R x C`` matrix to a square of side
``R + C`` whose extra row and column blocks cost ``threshold / 2`` (leaving a track or a detection
unmatched) and whose corner block costs 0, so a pair is matched only where that is cheaper than
leaving both sides unmatched. Here the same extended matrix is solved with SciPy's Hungarian
method (``linear_sum_assignment``), exact like LAPJV.
"""

from __future__ import annotations

import numpy as np

from edgefuse._deps import require


def linear_assignment(cost: np.ndarray, threshold: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(matches [K, 2] of (row, column), unmatched rows, unmatched columns)."""
    rows, columns = cost.shape
    if rows == 0 or columns == 0:
        return np.zeros((0, 2), dtype=np.int64), np.arange(rows), np.arange(columns)
    optimize = require("scipy.optimize", extra="vision", purpose="tracking")
    extended = np.full((rows + columns, rows + columns), threshold / 2.0)
    extended[rows:, columns:] = 0.0
    extended[:rows, :columns] = cost
    row_index, column_index = optimize.linear_sum_assignment(extended)
    keep = (row_index < rows) & (column_index < columns)
    matches = np.stack([row_index[keep], column_index[keep]], axis=1).astype(np.int64)
    return (matches, np.setdiff1d(np.arange(rows), matches[:, 0]),
            np.setdiff1d(np.arange(columns), matches[:, 1]))
