"""Each project's own post-processing, rewritten in plain numpy loops for the tests.

Why separate from edgefuse: the decoders under test are vectorised and share NMS code; these
follow the projects' code step by step (its loops, its order, its NMS), so an agreement means
edgefuse decodes as the project does, not as itself. Sources:

- YOLOX ``yolox/utils/demo_utils.py`` (``demo_postprocess``, ``nms`` with +1 areas,
  ``multiclass_nms_class_agnostic``) and ``demo/ONNXRuntime/onnx_inference.py``;
- Ultralytics ``ops.non_max_suppression`` end-to-end branch (``[1, K, 6]``);
- RT-DETR ``RTDETRPostProcessor`` / D-FINE ``DFINEPostProcessor`` (focal loss: sigmoid, top-k over
  the flattened scores, label = index mod C, query = index div C, boxes x image size);
- PaddleDetection ``MultiClassNMS`` (per class, nms_top_k, normalised IoU, keep_top_k) and
  ``deploy/python/picodet_postprocess.py`` (``PicoDetPostProcess``).

Each returns rows (x1, y1, x2, y2, score, class) in the project's output order.
"""

from __future__ import annotations

import numpy as np


def greedy_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float,
               plus_one: bool = False) -> list[int]:
    """Keep the best, drop those overlapping it by more than ``threshold``, repeat."""
    extra = 1.0 if plus_one else 0.0
    areas = (boxes[:, 2] - boxes[:, 0] + extra) * (boxes[:, 3] - boxes[:, 1] + extra)
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        best = order.pop(0)
        keep.append(best)
        survivors = []
        for other in order:
            w = max(0.0, min(boxes[best, 2], boxes[other, 2])
                    - max(boxes[best, 0], boxes[other, 0]) + extra)
            h = max(0.0, min(boxes[best, 3], boxes[other, 3])
                    - max(boxes[best, 1], boxes[other, 1]) + extra)
            inter = w * h
            if inter / (areas[best] + areas[other] - inter) <= threshold:
                survivors.append(other)
        order = survivors
    return keep


def yolox(output: np.ndarray, input_size: tuple[int, int], ratio: float, score_thr: float,
          nms_thr: float, strides=(8, 16, 32)) -> np.ndarray:
    """demo_postprocess, objectness x class, xyxy / ratio, class-agnostic +1 NMS."""
    predictions = output[0].astype(np.float64).copy()
    row = 0
    for stride in strides:
        for y in range(input_size[0] // stride):
            for x in range(input_size[1] // stride):
                predictions[row, 0] = (predictions[row, 0] + x) * stride
                predictions[row, 1] = (predictions[row, 1] + y) * stride
                predictions[row, 2:4] = np.exp(predictions[row, 2:4]) * stride
                row += 1
    assert row == len(predictions)
    scores = predictions[:, 4:5] * predictions[:, 5:]
    xyxy = np.stack([predictions[:, 0] - predictions[:, 2] / 2,
                     predictions[:, 1] - predictions[:, 3] / 2,
                     predictions[:, 0] + predictions[:, 2] / 2,
                     predictions[:, 1] + predictions[:, 3] / 2], 1) / ratio
    classes = scores.argmax(1)
    best = scores[np.arange(len(scores)), classes]
    valid = best > score_thr
    boxes, best, classes = xyxy[valid], best[valid], classes[valid]
    keep = greedy_nms(boxes, best, nms_thr, plus_one=True)
    return np.concatenate([boxes[keep], best[keep, None], classes[keep, None]], 1)


def ultralytics_end2end(output: np.ndarray, conf: float, max_det: int) -> np.ndarray:
    """``pred[pred[:, 4] > conf][:max_det]``."""
    rows = output[0].astype(np.float64)
    return rows[rows[:, 4] > conf][:max_det]


def detr(logits: np.ndarray, boxes: np.ndarray, image_wh: tuple[float, float], *,
         sigmoid: bool, top: int, threshold: float) -> np.ndarray:
    """RT-DETR / D-FINE post-processor, then their demo's ``score > threshold``."""
    scores = 1 / (1 + np.exp(-logits[0].astype(np.float64))) if sigmoid else logits[0]
    num_classes = scores.shape[1]
    flat = scores.reshape(-1)
    index = np.argsort(-flat, kind="stable")[:top]
    rows = []
    for i in index:
        query, label = i // num_classes, i % num_classes
        cx, cy, w, h = boxes[0, query]
        width, height = image_wh
        box = [(cx - w / 2) * width, (cy - h / 2) * height,
               (cx + w / 2) * width, (cy + h / 2) * height]
        if flat[i] > threshold:
            rows.append([*box, flat[i], label])
    return np.array(rows, np.float64).reshape(-1, 6)


def paddle_multiclass_nms(boxes: np.ndarray, scores: np.ndarray, score_thr: float,
                          nms_thr: float, nms_top_k: int, keep_top_k: int) -> np.ndarray:
    """MultiClassNMS (normalized): boxes [N, 4], scores [C, N]."""
    rows = []
    for label in range(scores.shape[0]):
        candidates = np.flatnonzero(scores[label] > score_thr)
        candidates = candidates[np.argsort(-scores[label, candidates], kind="stable")][:nms_top_k]
        keep = greedy_nms(boxes[candidates].astype(np.float64),
                          scores[label, candidates].astype(np.float64), nms_thr)
        rows += [[*boxes[candidates[k]], scores[label, candidates[k]], label] for k in keep]
    rows.sort(key=lambda r: -r[4])
    return np.array(rows[:keep_top_k], np.float64).reshape(-1, 6)


def picodet(scores: list[np.ndarray], raw_boxes: list[np.ndarray], strides, input_size,
            score_thr: float, nms_thr: float, nms_top_k: int = 1000,
            keep_top_k: int = 100) -> np.ndarray:
    """PicoDetPostProcess for one image, in input pixels (its scale_factor of 1)."""
    reg_max = raw_boxes[0].shape[-1] // 4 - 1
    decoded, selected = [], []
    for stride, dist, score in zip(strides, raw_boxes, scores, strict=True):
        dist, score = dist[0].astype(np.float64), score[0].astype(np.float64)
        rows_h, rows_w = -(-input_size[0] // stride), -(-input_size[1] // stride)
        centres = []
        for y in range(rows_h):
            for x in range(rows_w):
                centres.append([(x + 0.5) * stride, (y + 0.5) * stride] * 2)
        centres = np.array(centres)
        bins = dist.reshape(-1, reg_max + 1)
        soft = np.exp(bins - bins.max(1, keepdims=True))
        soft /= soft.sum(1, keepdims=True)
        distance = (soft * np.arange(reg_max + 1)).sum(1).reshape(-1, 4) * stride
        top = np.argsort(score.max(axis=1))[::-1][:nms_top_k]
        decoded.append(centres[top] + np.array([-1, -1, 1, 1]) * distance[top])
        selected.append(score[top])
    boxes, confidences = np.concatenate(decoded), np.concatenate(selected)
    rows = []
    for label in range(confidences.shape[1]):
        mask = confidences[:, label] > score_thr
        if not mask.any():
            continue
        subset, probs = boxes[mask], confidences[mask, label]
        keep = greedy_nms(subset, probs, nms_thr)[:keep_top_k]
        rows += [[*subset[k], probs[k], label] for k in keep]
    return np.array(rows, np.float64).reshape(-1, 6)
