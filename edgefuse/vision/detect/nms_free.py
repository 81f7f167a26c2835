"""NMS-free detector outputs: ``[1, K, 6]`` end-to-end exports and the DETR family.

Why no NMS here: these models were trained one-to-one (YOLOv10's one-to-one head, YOLO26 and
Ultralytics ``end2end`` exports, DETR's Hungarian matching); running NMS on their output only
removes true neighbours. What each project does after the graph:

- ``[1, K, 6]`` rows x1, y1, x2, y2 (input pixels), score, class: Ultralytics
  ``ops.non_max_suppression`` for end-to-end outputs (and YOLOv10's predictor) keeps the rows
  with ``score > conf``, in the model's order, at most ``max_det`` of them. Ultralytics'
  RT-DETR export gives the same rows with normalised cx, cy, w, h boxes (``RTDETRDecoder.
  postprocess``); its predictor keeps them the same way and scales x by the width and y by the
  height (``models/rtdetr/predict.py``).
- DETR (RT-DETR ``RTDETRPostProcessor``, D-FINE ``DFINEPostProcessor``, focal-loss models):
  ``boxes [1, Q, 4]`` normalised cx, cy, w, h and ``logits [1, Q, C]``; scores are
  ``sigmoid(logits)`` (used as they are when the graph ends in a Sigmoid), the best
  ``num_top_queries`` (300, here ``max_det``) of the flattened Q x C scores are taken with
  ``label = index mod C`` and ``query = index div C`` (a query can carry two classes), and boxes
  are scaled by the image size. Their demos then keep ``score > conf``.
"""

from __future__ import annotations

import numpy as np

from edgefuse.errors import InputError, Ref


def end2end_rows(output: np.ndarray, conf: float, max_det: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xyxy boxes, scores, classes) of a [1, K, 6] output, as Ultralytics keeps them."""
    if output.ndim != 3 or output.shape[0] != 1 or output.shape[2] != 6:
        raise InputError(f"an end-to-end output is [1, K, 6], got {list(output.shape)}",
                         reference=Ref.BAD_LAYOUT)
    rows = output[0].astype(np.float32, copy=False)
    rows = rows[rows[:, 4] > conf][:max_det]
    return rows[:, :4].copy(), rows[:, 4].copy(), np.rint(rows[:, 5]).astype(np.int64)


def normalised_cxcywh_to_xyxy(boxes: np.ndarray, input_size: tuple[int, int]) -> np.ndarray:
    """Normalised cx, cy, w, h -> x1, y1, x2, y2 in input pixels."""
    height, width = input_size
    scaled = boxes.astype(np.float32) * np.array([width, height, width, height], np.float32)
    half = scaled[:, 2:] / 2
    return np.concatenate([scaled[:, :2] - half, scaled[:, :2] + half], axis=1)


def detr_top(boxes: np.ndarray, scores: np.ndarray, input_size: tuple[int, int], *,
             logits: bool, conf: float, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xyxy boxes in input pixels, scores, classes): the top-k over queries x classes."""
    cxcywh = boxes[0].astype(np.float32, copy=False)
    values = scores[0].astype(np.float32, copy=False)
    if logits:
        values = 1.0 / (1.0 + np.exp(-values))
    flat = values.reshape(-1)
    count = min(top, flat.size)
    best = np.argpartition(-flat, count - 1)[:count] if count < flat.size else np.arange(flat.size)
    best = best[np.argsort(-flat[best], kind="stable")]
    best = best[flat[best] > conf]
    num_classes = values.shape[1]
    query, label = best // num_classes, best % num_classes
    height, width = input_size
    chosen = cxcywh[query] * np.array([width, height, width, height], np.float32)
    half = chosen[:, 2:] / 2
    xyxy = np.concatenate([chosen[:, :2] - half, chosen[:, :2] + half], axis=1)
    return xyxy.astype(np.float32), flat[best], label.astype(np.int64)
