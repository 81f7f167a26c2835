"""PaddleDetection's PP-YOLOE and PicoDet outputs, decoded as PaddleDetection does.

Two exports exist without the NMS in the graph:

- ``exclude_nms`` (PP-YOLOE, PicoDet with ``export_post_process``): ``boxes [1, N, 4]`` xyxy in
  input pixels (``PPYOLOEHead.post_process``: anchor points minus/plus the distances, times the
  stride; the scale_factor division is left to us, since we map boxes back through the frame's
  geometry) and ``scores [1, C, N]`` sigmoid probabilities;
- PicoDet raw per-stride heads (``export_post_process=False``, ``PicoHeadV2.forward_eval``): for
  each stride, class scores ``[1, N_s, C]`` (sigmoid, or the aligned head's square root) and
  DFL distributions ``[1, N_s, 4 (reg_max + 1)]``. ``deploy/python/picodet_postprocess.py``
  (PicoDetPostProcess) decodes them: reg_max from the shape, a softmax over each side's
  reg_max + 1 bins, the expectation over 0..reg_max times the stride as distances left, top,
  right, bottom from the cell centre ``(column, row) + 0.5`` times the stride; per stride only
  the ``nms_top_k`` (1000) anchors with the best class score go on.

Both then run Paddle's multi-class NMS: every (box, class) with a score above the threshold is a
candidate of its own (a box can be kept for two classes), NMS per class (``MultiClassNMS``,
``normalized: true``: no +1 pixel), the best ``keep_top_k`` overall. ``decode`` does that part.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.vision.detect.heads import pico_centres

NMS_TOP_K = 1000  # PicoDetPostProcess / MultiClassNMS nms_top_k


def ppyoloe_scores(boxes: np.ndarray, scores: np.ndarray, conf: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(xyxy boxes [n, 4], per-class scores [n, C]) of the boxes whose best score > conf."""
    per_box = scores[0].T.astype(np.float32, copy=False)  # [N, C]
    picked = np.flatnonzero(per_box.max(axis=1) > conf)
    return boxes[0][picked].astype(np.float32), per_box[picked]


def pico_scores(scores: Sequence[np.ndarray], distributions: Sequence[np.ndarray],
                strides: Sequence[int], input_size: tuple[int, int], conf: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """(xyxy boxes [n, 4], per-class scores [n, C]) over all strides, best score > conf."""
    all_boxes, all_scores = [], []
    for stride, score, dist in zip(strides, scores, distributions, strict=True):
        score = score[0].astype(np.float32, copy=False)
        dist = dist[0].astype(np.float32, copy=False)
        centres = pico_centres(input_size, stride)
        if len(centres) != len(score) or len(dist) != len(score):
            raise InputError(
                f"a PicoDet head at stride {stride} for a {input_size[0]}x{input_size[1]} input "
                f"has {len(centres)} cells, the outputs have {len(score)} and {len(dist)}",
                hint="set 'strides:' to the model's FPN strides", reference=Ref.BAD_LAYOUT)
        best = score.max(axis=1)
        top = np.argsort(best, kind="stable")[::-1][:NMS_TOP_K]
        top = top[best[top] > conf]
        bins = dist.shape[1] // 4
        logits = dist[top].reshape(-1, bins)
        logits = np.exp(logits - logits.max(axis=1, keepdims=True))
        expected = (logits / logits.sum(axis=1, keepdims=True)) @ np.arange(bins, dtype=np.float32)
        distances = expected.reshape(-1, 4) * stride
        centre = centres[top]
        all_boxes.append(np.concatenate([centre - distances[:, :2], centre + distances[:, 2:]], 1))
        all_scores.append(score[top])
    return (np.concatenate(all_boxes).astype(np.float32),
            np.concatenate(all_scores).astype(np.float32))
