"""Mean IoU between two label maps (the candidate scored against the reference's argmax).

Why a confusion matrix over all samples (VainF's StreamSegMetrics): per-class IoU is
``tp / (tp + fp + fn)`` summed over every pixel of every sample, then averaged over the classes
that occur in either map; a class neither map predicts has no IoU and does not count.
"""

from __future__ import annotations

import numpy as np


def confusion(reference: np.ndarray, candidate: np.ndarray, classes: int) -> np.ndarray:
    """[classes, classes] counts: rows are reference labels, columns candidate labels."""
    ref = np.asarray(reference).reshape(-1).astype(np.int64)
    cand = np.asarray(candidate).reshape(-1).astype(np.int64)
    if ref.shape != cand.shape:
        raise ValueError(f"label map sizes differ: {ref.size} vs {cand.size}")
    return np.bincount(ref * classes + cand, minlength=classes * classes).reshape(classes, classes)


def mean_iou(reference: np.ndarray, candidate: np.ndarray, classes: int) -> dict[str, float]:
    """mIoU and pixel agreement of integer label maps of any (equal) shape."""
    matrix = confusion(reference, candidate, classes).astype(np.float64)
    tp = np.diag(matrix)
    union = matrix.sum(axis=0) + matrix.sum(axis=1) - tp
    present = union > 0
    iou = tp[present] / union[present]
    return {
        "mean_iou": float(np.mean(iou)) if iou.size else 1.0,
        "pixel_agreement": float(tp.sum() / matrix.sum()) if matrix.sum() else 1.0,
        "classes_present": int(present.sum()),
    }
