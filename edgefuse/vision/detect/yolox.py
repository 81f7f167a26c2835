"""A raw YOLOX head ``[1, N, 5 + C]`` decoded on the host, as YOLOX's own demo does.

Why its own decoder: exported with ``decode_in_inference=False`` (the default of YOLOX's
``tools/export_onnx.py``), the head hands over conv outputs, not boxes. YOLOX's
``yolox/utils/demo_utils.py::demo_postprocess`` decodes them per anchor point, in the order
stride, row, column (strides 8, 16, 32; p6 models add 64; ``strides:`` in the config)::

    cx, cy = (tx + column, ty + row) x stride      w, h = exp(tw, th) x stride

and ``demo/ONNXRuntime/onnx_inference.py`` scores each class ``objectness x class probability``
(both already sigmoid in the graph). Its ``multiclass_nms`` is class-agnostic by default (each
box keeps its best class, one NMS over all) and measures IoU with the legacy ``+1`` pixel
(``(x2 - x1 + 1) x (y2 - y1 + 1)``); ``decode`` reproduces both (see ``PIXEL_INCLUSIVE``).
A YOLOX exported with ``decode_in_inference=True`` is already decoded: that is the ``yolov5``
layout (``layout: yolov5``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.vision.detect.heads import yolox_grid


def yolox_scores(output: np.ndarray, input_size: tuple[int, int], strides: Sequence[int],
                 conf: float) -> tuple[np.ndarray, np.ndarray]:
    """(xyxy boxes in input pixels, per-class scores [n, C]) of the rows whose best score > conf."""
    rows = output[0].astype(np.float32, copy=False)
    cells, scales = yolox_grid(input_size, strides)
    if len(cells) != len(rows):
        raise InputError(
            f"a raw YOLOX head at {input_size[0]}x{input_size[1]} with strides "
            f"{list(strides)} has {len(cells)} rows, the output has {len(rows)}",
            hint="set 'strides:' to the model's FPN strides, or preprocess.size to its input size",
            reference=Ref.BAD_LAYOUT)
    # Class probabilities are at most 1: only rows with objectness > conf can score above it.
    hopeful = np.flatnonzero(rows[:, 4] > conf)
    scores = rows[hopeful, 5:] * rows[hopeful, 4:5]
    keep = scores.max(axis=1, initial=0.0) > conf
    picked, scores = hopeful[keep], scores[keep]
    chosen, stride = rows[picked], scales[picked]
    centre = (chosen[:, :2] + cells[picked]) * stride
    size = np.exp(chosen[:, 2:4]) * stride
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
    return boxes.astype(np.float32), scores
