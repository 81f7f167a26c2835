"""Text detection scores: pixel precision/recall/F1/IoU of a binarized map, and word recall and
precision of found boxes matched one to one to the true word boxes at IoU >= 0.5.

Why both: the pixel scores say how well the map covers the (shrunk) word regions; the word scores
say what a reader of the detector's output gets, the ICDAR-style figure (a box that matches no
word is a false alarm, a word no box matches is missed). The IoU of two quadrilaterals is exact:
both are convex (rotated rectangles), so their intersection is one convex polygon
(Sutherland-Hodgman clipping) and areas come from the shoelace formula.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_IOU = 0.5


def pixel_scores(predicted: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """Precision, recall, F1 and IoU of boolean maps of any equal shape (a batch counts as one);
    with nothing predicted and nothing true every score is 1."""
    pred, true = np.asarray(predicted, bool), np.asarray(target, bool)
    if pred.shape != true.shape:
        raise ValueError(f"map shapes differ: {pred.shape} vs {true.shape}")
    hits = float(np.logical_and(pred, true).sum())
    found, real = float(pred.sum()), float(true.sum())
    precision = hits / found if found else float(real == 0)
    recall = hits / real if real else float(found == 0)
    union = found + real - hits
    return {
        "precision": precision,
        "recall": recall,
        "f1": 2 * hits / (found + real) if found + real else 1.0,
        "iou": hits / union if union else 1.0,
    }


def word_scores(predicted: Sequence[Sequence[np.ndarray]], truth: Sequence[Sequence[np.ndarray]],
                min_iou: float = MIN_IOU) -> dict[str, float | int]:
    """Recall, precision and their harmonic mean over images: ``predicted[i]`` and ``truth[i]``
    are image i's quads ([4, 2] each); each true word is matched to at most one box and each box
    to at most one word, highest IoU first."""
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predicted images, {len(truth)} true ones")
    matched = found = real = 0
    for boxes, words in zip(predicted, truth, strict=True):
        found, real = found + len(boxes), real + len(words)
        pairs = sorted(((quad_iou(b, w), i, j) for i, b in enumerate(boxes)
                        for j, w in enumerate(words)), reverse=True)
        used_boxes, used_words = set(), set()
        for iou, i, j in pairs:
            if iou < min_iou:
                break
            if i not in used_boxes and j not in used_words:
                used_boxes.add(i)
                used_words.add(j)
                matched += 1
    recall = matched / real if real else 1.0
    precision = matched / found if found else 1.0
    hmean = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return {"recall": recall, "precision": precision, "hmean": hmean, "matched": matched,
            "words": real, "boxes": found}


def quad_iou(first: np.ndarray, second: np.ndarray) -> float:
    """Intersection over union of two convex quadrilaterals ([4, 2], either orientation)."""
    a, b = np.asarray(first, np.float64), np.asarray(second, np.float64)
    area_a, area_b = abs(_area(a)), abs(_area(b))
    if area_a == 0 or area_b == 0:
        return 0.0
    inter = _clip(a, b)
    overlap = abs(_area(np.array(inter))) if len(inter) >= 3 else 0.0
    return overlap / (area_a + area_b - overlap)


def _area(polygon: np.ndarray) -> float:
    x, y = polygon[:, 0], polygon[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def _clip(subject: np.ndarray, clipper: np.ndarray) -> list[np.ndarray]:
    """The part of ``subject`` inside the convex ``clipper`` (Sutherland-Hodgman)."""
    sign = 1.0 if _area(clipper) > 0 else -1.0
    output = list(subject)
    for k in range(len(clipper)):
        start, end = clipper[k], clipper[(k + 1) % len(clipper)]
        edge = end - start

        def side(point: np.ndarray, start=start, edge=edge) -> float:
            return sign * (edge[0] * (point[1] - start[1]) - edge[1] * (point[0] - start[0]))

        points, output = output, []
        for index, current in enumerate(points):
            previous = points[index - 1]
            s_cur, s_prev = side(current), side(previous)
            if s_cur >= 0:
                if s_prev < 0:
                    output.append(previous + (current - previous) * s_prev / (s_prev - s_cur))
                output.append(current)
            elif s_prev >= 0:
                output.append(previous + (current - previous) * s_prev / (s_prev - s_cur))
        if not output:
            break
    return output
