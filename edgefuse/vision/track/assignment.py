"""Minimum-cost matching of tracks to detections, with a cost limit.

The same problem as ByteTrack's ``matching.linear_assignment``, ``lap.lapjv(cost,
extend_cost=True, cost_limit=threshold)``: lap extends the ``R x C`` matrix to a square of side
``R + C`` whose extra blocks cost ``threshold / 2`` (a track or a detection left unmatched), so a
pair is matched only where that is cheaper than leaving both sides unmatched. Solved here without
the extension, which is four times the work: capping every cost at ``threshold`` and solving the
rectangular problem (SciPy's ``linear_sum_assignment``, exact like LAPJV) gives the same
matching, because a capped pair costs exactly what its two unmatched sides cost in lap's square,
and the sides left over in the rectangle cost the same constant in every solution. Pairs at the
cap are then returned unmatched.
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
    row_index, column_index = optimize.linear_sum_assignment(np.minimum(cost, threshold))
    keep = cost[row_index, column_index] < threshold
    matches = np.stack([row_index[keep], column_index[keep]], axis=1).astype(np.int64)
    free_rows = np.ones(rows, dtype=bool)
    free_rows[matches[:, 0]] = False
    free_columns = np.ones(columns, dtype=bool)
    free_columns[matches[:, 1]] = False
    return matches, np.flatnonzero(free_rows), np.flatnonzero(free_columns)
