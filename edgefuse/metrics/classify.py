"""Top-k agreement between two classifiers' scores.

Why agreement and not accuracy: with no labels, the reference model's top-1 class is the label.
``top1`` is the fraction of samples whose top-1 classes agree; ``top5`` the fraction whose
reference top-1 class is among the candidate's five highest scores.
"""

from __future__ import annotations

import numpy as np


def topk_agreement(reference: np.ndarray, candidate: np.ndarray, k: int = 5) -> dict[str, float]:
    """Scores shaped [samples, classes] (anything after the first axis is flattened)."""
    ref = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    cand = np.asarray(candidate, dtype=np.float64).reshape(len(candidate), -1)
    if ref.shape != cand.shape:
        raise ValueError(f"score shapes differ: {ref.shape} vs {cand.shape}")
    labels = np.argmax(ref, axis=1)
    top1 = float(np.mean(np.argmax(cand, axis=1) == labels))
    k = min(k, cand.shape[1])
    # Stable descending order: ties keep the lower class index first, like argmax.
    topk = np.argsort(-cand, axis=1, kind="stable")[:, :k]
    topk_hit = float(np.mean(np.any(topk == labels[:, None], axis=1)))
    return {"top1": top1, f"top{k}": topk_hit}
