"""COCO-style box AP (AP50 and AP50:95, 101-point interpolation, class-aware), a one-to-one
box match of two detection sets, and YOLO decoding.

Why a re-implementation of COCOeval's bbox path: parity scores FP16 boxes against FP32 boxes, with
no annotation files and no pycocotools. It follows ``COCOeval.evaluateImg``/``accumulate``: per
image and class the detections are sorted by score and cut to ``max_detections``; each detection
takes the unmatched ground truth of its class with the highest IoU at or above the threshold;
detections of all images are merged by score; precision is made monotone from the right and read
at 101 recall points (0, 0.01, ..., 1), 0 beyond the last recall reached; AP is the mean over
those points and over the classes that have ground truth. Boxes are xyxy in pixels; IoU has no
"+1". There are no area ranges and no crowd boxes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from edgefuse.nms import nms

IOU_THRESHOLDS = np.round(np.arange(0.5, 0.951, 0.05), 2)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)
# YOLOv5's non_max_suppression bounds on box sides in pixels (utils/general.py: min_wh, max_wh):
# a box thinner than 2 px is no object, and its IoU flips with sub-pixel rounding.
MIN_WH, MAX_WH = 2.0, 7680.0


@dataclasses.dataclass
class Detections:
    """One image's boxes (xyxy, [N, 4]), scores [N] and integer classes [N]."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xyxy boxes, [len(a), len(b)]."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    # np.maximum(x, 0), not np.clip(x, 0, None): the same values, a fifth of the call overhead
    # (the tracker calls this twice a frame)
    area_a = np.maximum(a[:, 2] - a[:, 0], 0) * np.maximum(a[:, 3] - a[:, 1], 0)
    area_b = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    width = np.maximum(np.minimum(a[:, None, 2], b[None, :, 2])
                       - np.maximum(a[:, None, 0], b[None, :, 0]), 0)
    height = np.maximum(np.minimum(a[:, None, 3], b[None, :, 3])
                        - np.maximum(a[:, None, 1], b[None, :, 1]), 0)
    inter = width * height
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def match_detections(actual: Detections, expected: Detections, threshold: float, *,
                     classes: bool = True) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pairs (expected index, actual index) at IoU >= ``threshold`` (of the same class unless
    ``classes`` is False), each expected box taking, greedily by its score, the free actual box
    it overlaps most; then the expected boxes left unmatched and the actual ones left over."""
    overlaps = box_iou(expected.boxes, actual.boxes)
    taken: set[int] = set()
    matched, missing = [], []
    for i in np.argsort(-np.asarray(expected.scores), kind="stable"):
        candidates = [(overlaps[i, j], j) for j in range(len(actual)) if j not in taken
                      and overlaps[i, j] >= threshold
                      and (not classes or int(actual.classes[j]) == int(expected.classes[i]))]
        if candidates:
            _, j = max(candidates)
            taken.add(j)
            matched.append((int(i), j))
        else:
            missing.append(int(i))
    extra = [j for j in range(len(actual)) if j not in taken]
    return matched, sorted(missing), extra


def average_precision(
    predictions: list[Detections],
    ground_truth: list[Detections],
    *,
    max_detections: int = 100,
) -> dict[str, float | None]:
    """AP50 and AP50:95 of ``predictions`` against ``ground_truth`` (one entry per image).

    Returns None for both when no image has any ground-truth box.
    """
    if len(predictions) != len(ground_truth):
        raise ValueError("predictions and ground truth must cover the same images")
    classes = sorted({int(c) for gt in ground_truth for c in gt.classes})
    if not classes:
        return {"AP50": None, "AP50:95": None, "classes": 0, "ground_truth_boxes": 0}
    per_threshold = np.zeros((len(IOU_THRESHOLDS), len(classes)))
    for column, cls in enumerate(classes):
        per_threshold[:, column] = _class_ap(predictions, ground_truth, cls, max_detections)
    ap = per_threshold.mean(axis=1)
    return {
        "AP50": float(ap[0]),
        "AP50:95": float(ap.mean()),
        "classes": len(classes),
        "ground_truth_boxes": int(sum(len(gt) for gt in ground_truth)),
    }


def _class_ap(predictions, ground_truth, cls: int, max_detections: int) -> np.ndarray:
    scores, matched, total_gt = [], [], 0
    for pred, gt in zip(predictions, ground_truth, strict=True):
        gt_boxes = gt.boxes[gt.classes == cls]
        total_gt += len(gt_boxes)
        mask = pred.classes == cls
        order = np.argsort(-pred.scores[mask], kind="mergesort")[:max_detections]
        boxes, image_scores = pred.boxes[mask][order], pred.scores[mask][order]
        ious = box_iou(boxes, gt_boxes)
        image_matched = np.zeros((len(IOU_THRESHOLDS), len(boxes)), dtype=bool)
        for t, threshold in enumerate(IOU_THRESHOLDS):
            taken = np.zeros(len(gt_boxes), dtype=bool)
            for d in range(len(boxes)):
                best, best_iou = -1, min(threshold, 1 - 1e-10)
                for g in range(len(gt_boxes)):
                    if taken[g] or ious[d, g] < best_iou:
                        continue
                    best, best_iou = g, ious[d, g]
                if best >= 0:
                    taken[best] = True
                    image_matched[t, d] = True
        scores.append(image_scores)
        matched.append(image_matched)
    if total_gt == 0:
        return np.zeros(len(IOU_THRESHOLDS))
    order = np.argsort(-np.concatenate(scores), kind="mergesort")
    tp_all = np.concatenate(matched, axis=1)[:, order]
    result = np.zeros(len(IOU_THRESHOLDS))
    for t in range(len(IOU_THRESHOLDS)):
        tp = np.cumsum(tp_all[t]).astype(np.float64)
        fp = np.cumsum(~tp_all[t]).astype(np.float64)
        recall = tp / total_gt
        precision = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
        if precision.size == 0:
            continue
        precision = np.maximum.accumulate(precision[::-1])[::-1]
        indices = np.searchsorted(recall, RECALL_POINTS, side="left")
        valid = indices < len(precision)
        sampled = np.zeros(len(RECALL_POINTS))
        sampled[valid] = precision[indices[valid]]
        result[t] = float(np.mean(sampled))
    return result


def decode_yolo(
    output: np.ndarray,
    *,
    conf_threshold: float,
    iou_threshold: float = 0.45,
    max_detections: int = 300,
    min_wh: float = MIN_WH,
    max_wh: float = MAX_WH,
) -> list[Detections]:
    """Boxes from raw YOLO heads, one ``Detections`` per image.

    Layouts (told apart by which axis is longer): YOLOv3/v5 ``[B, N, 5 + C]`` (cx, cy, w, h in
    pixels, objectness, C class probabilities; score = obj * cls) and YOLOv8 ``[B, 4 + C, N]``
    (cx, cy, w, h, C class scores). Boxes with a side outside [``min_wh``, ``max_wh``] pixels are
    dropped (YOLOv5's ``non_max_suppression`` width-height filter), then class-aware NMS and the
    top ``max_detections``.
    """
    output = np.asarray(output, dtype=np.float64)
    if output.ndim != 3:
        raise ValueError(f"expected a [batch, ..., ...] YOLO output, got shape {output.shape}")
    channels_first = output.shape[1] < output.shape[2]
    images = []
    for head in output:
        rows = head.T if channels_first else head
        if channels_first:
            class_scores = rows[:, 4:]
        else:
            class_scores = rows[:, 5:] * rows[:, 4:5]
        classes = np.argmax(class_scores, axis=1)
        scores = class_scores[np.arange(len(rows)), classes]
        sides = rows[:, 2:4]
        keep = (scores > conf_threshold) & np.all((sides >= min_wh) & (sides <= max_wh), axis=1)
        boxes = _xywh_to_xyxy(rows[keep, :4])
        scores, classes = scores[keep], classes[keep]
        chosen = nms(boxes, scores, iou_threshold, classes, max_det=max_detections)
        images.append(Detections(boxes[chosen], scores[chosen], classes[chosen]))
    return images


def _xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    half = xywh[:, 2:4] / 2
    return np.concatenate([xywh[:, :2] - half, xywh[:, :2] + half], axis=1)
