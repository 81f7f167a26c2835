"""Greedy, class-aware non-maximum suppression in numpy, exact and without a Python loop per box.

Why not the textbook loop: a loop that keeps the best box and drops its neighbours runs once per
kept box, in Python, and is the slowest part of a YOLO post-process on a small board CPU. Here:

1. candidates are ranked once, score descending, ties by lower index (the order ONNX Runtime's
   NonMaxSuppression and edgefuse's YoloHead op use), then grouped by class keeping that order;
2. only pairs of the same class are compared (Ultralytics shifts boxes by ``class * 7680`` and
   compares all pairs; in float32 that offset leaves 0.06-pixel resolution at class 79 and costs
   a K x K matrix): the pairs are enumerated with ``repeat``/``cumsum`` arithmetic in chunks of a
   bounded size, and those with IoU strictly above the threshold (torchvision) become edges
   "higher-ranked i suppresses j if i is kept";
3. greedy NMS is the unique solution of ``keep[j] = no edge i -> j with keep[i]``, since j only
   depends on higher-ranked boxes. Iterating that rule from "keep all" reaches the solution in as
   many steps as the longest chain "A suppresses B, which would have suppressed C" (two or three
   on real detections), each step one scatter over the edges.

Memory is bounded by the chunk size, time by the number of same-class pairs.
"""

from __future__ import annotations

import numpy as np

TILE = 512  # ranks resolved together; later ones are first cleared against the kept boxes
PAIR_CHUNK = 1 << 21  # same-class pairs compared per chunk


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
        classes: np.ndarray | None = None, *, max_det: int | None = None) -> np.ndarray:
    """Indices of the kept boxes, best score first (ties: lower index), at most ``max_det``.

    ``boxes`` xyxy [N, 4]; ``classes`` [N] makes it class-aware (None: class-agnostic).
    """
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float32).reshape(-1)
    count = len(scores)
    ranked = np.argsort(-scores, kind="stable")  # rank -> box index; positions below are ranks
    coords = np.ascontiguousarray(boxes[ranked].T)  # x1, y1, x2, y2 rows
    areas = np.maximum(coords[2] - coords[0], 0) * np.maximum(coords[3] - coords[1], 0)
    labels = None if classes is None else np.asarray(classes).reshape(-1)[ranked]
    threshold = np.float32(iou_threshold)
    kept: list[np.ndarray] = []
    kept_count = 0
    for start in range(0, count, TILE):
        candidates = np.arange(start, min(start + TILE, count))
        if kept_count:
            first, second = _cross_pairs(np.concatenate(kept), candidates, labels)
            hit = _iou_above(coords, areas, first, second, threshold)
            candidates = np.setdiff1d(candidates, second[hit])
        if len(candidates):
            chosen = _greedy_among(coords, areas, labels, candidates, threshold)
            kept.append(chosen)
            kept_count += len(chosen)
        if max_det is not None and kept_count >= max_det:
            break
    if not kept:
        return np.zeros(0, dtype=np.int64)
    return ranked[np.concatenate(kept)[:max_det]]


def _cross_pairs(kept: np.ndarray, candidates: np.ndarray,
                 labels: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(kept, candidate) pairs of the same class, found by sorting, not by a full product."""
    if labels is None:
        return np.repeat(kept, len(candidates)), np.tile(candidates, len(kept))
    order = np.argsort(labels[kept], kind="stable")
    sorted_labels = labels[kept][order]
    wanted = labels[candidates]
    low = np.searchsorted(sorted_labels, wanted, side="left")
    counts = np.searchsorted(sorted_labels, wanted, side="right") - low
    second = np.repeat(candidates, counts)
    offsets = np.arange(len(second)) - np.repeat(np.cumsum(counts) - counts, counts)
    return kept[order[np.repeat(low, counts) + offsets]], second


def _greedy_among(coords: np.ndarray, areas: np.ndarray, labels: np.ndarray | None,
                  candidates: np.ndarray, threshold: np.float32) -> np.ndarray:
    """The ranks greedy NMS keeps among ``candidates`` (see the module docstring)."""
    count = len(candidates)
    if labels is None:
        grouped, sizes = np.arange(count), np.array([count])
    else:
        grouped = np.argsort(labels[candidates], kind="stable")  # class groups, rank order
        sizes = np.unique(labels[candidates][grouped], return_counts=True)[1]
    members = candidates[grouped]
    source, target = _suppression_edges(coords, areas, members, sizes, threshold)
    return np.sort(members[_greedy(count, source, target)])


def _suppression_edges(coords: np.ndarray, areas: np.ndarray, members: np.ndarray,
                       sizes: np.ndarray, threshold: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) positions in ``members``, i before j in the same group, with IoU > threshold."""
    count = len(members)
    ends = np.repeat(np.cumsum(sizes), sizes)
    partners = ends - np.arange(count) - 1  # later boxes of the same group
    total = np.cumsum(partners)
    sources, targets = [], []
    start = 0
    while start < count and total[-1] > (total[start - 1] if start else 0):
        done = total[start - 1] if start else 0
        stop = max(int(np.searchsorted(total, done + PAIR_CHUNK, side="right")), start + 1)
        counts = partners[start:stop]
        first = np.repeat(np.arange(start, stop), counts)
        offsets = np.arange(len(first)) - np.repeat(np.cumsum(counts) - counts, counts)
        second = first + 1 + offsets
        hit = _iou_above(coords, areas, members[first], members[second], threshold)
        sources.append(first[hit])
        targets.append(second[hit])
        start = stop
    if not sources:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(sources), np.concatenate(targets)


def _iou_above(coords: np.ndarray, areas: np.ndarray, first: np.ndarray, second: np.ndarray,
               threshold: np.float32) -> np.ndarray:
    """IoU(first[k], second[k]) > threshold, in float32 (an empty union compares False)."""
    x1, y1, x2, y2 = coords
    width = np.minimum(x2[first], x2[second])
    width -= np.maximum(x1[first], x1[second])
    np.maximum(width, 0, out=width)
    height = np.minimum(y2[first], y2[second])
    height -= np.maximum(y1[first], y1[second])
    np.maximum(height, 0, out=height)
    inter = width * height
    union = areas[first] + areas[second] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / union > threshold


def _greedy(count: int, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The positions greedy NMS keeps, from the suppression edges (see the module docstring)."""
    keep = np.ones(count, dtype=bool)
    if len(source) == 0:
        return np.flatnonzero(keep)
    while True:
        suppressed = np.zeros(count, dtype=bool)
        suppressed[target[keep[source]]] = True
        updated = ~suppressed
        if np.array_equal(updated, keep):
            return np.flatnonzero(keep)
        keep = updated
