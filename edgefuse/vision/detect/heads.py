"""Which output is which for a detector layout, and the anchor grids that raw heads index.

Why a record: the layouts with several outputs (DETR boxes + logits, PP-YOLOE boxes + scores,
PicoDet's eight per-stride heads, edgefuse's YoloHead) are bound to the model's output names
once, when the model is opened and its shapes are checked, not re-guessed on every frame.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

HEAD_OUTPUTS = ("boxes", "scores", "classes", "num_detections")
YOLOX_STRIDES = (8, 16, 32)  # YOLOX demo_postprocess (p6: 8, 16, 32, 64)


@dataclasses.dataclass(frozen=True)
class Heads:
    """A layout bound to output names (see each field), with what the shapes said."""

    layout: str
    # yolov8 / yolov5 / yolox / end2end [K, 6]: (prediction,); DETR and ppyoloe: (boxes,
    # scores); PicoDet: (scores per stride..., distributions per stride...); yolo_head: its four.
    names: tuple[str, ...]
    num_classes: int | None = None
    form: str = ""  # end2end: "k6" | "detr"; ppyoloe: "boxes_scores" | "pico"
    strides: tuple[int, ...] = ()
    logits: bool = False  # DETR scores that still need a sigmoid
    reg_max: int | None = None  # PicoDet DFL bins - 1
    box_format: str = ""  # end2end k6: "xyxy" (input pixels) or "cxcywh" (normalised)
    box_why: str = ""  # what told the box format

    def describe(self) -> str:
        parts = [self.form] if self.form else []
        if self.num_classes is not None:
            parts.append(f"{self.num_classes} classes")
        if self.strides:
            parts.append("strides " + ",".join(map(str, self.strides)))
        if self.reg_max is not None:
            parts.append(f"reg_max {self.reg_max}")
        if self.box_format:
            parts.append("boxes x1,y1,x2,y2 in input pixels" if self.box_format == "xyxy"
                         else "boxes cx,cy,w,h normalised")
        if self.form == "detr":
            parts.append("scores are logits (sigmoid applied)" if self.logits
                         else "scores are probabilities")
        return self.layout + (f" ({', '.join(parts)})" if parts else "")


def head_outputs(outputs: Mapping[str, np.ndarray] | Sequence[tuple[str, tuple, str]]
                 ) -> dict[str, str] | None:
    """Which output is which of a YoloHead's four (by rank and dtype), or None when not a head.

    Takes arrays or (name, shape, dtype name) triples, so the layout can be told before a run.
    """
    items = ([(n, a.shape, a.dtype.name) for n, a in outputs.items()]
             if isinstance(outputs, Mapping) else list(outputs))
    if len(items) != 4:
        return None
    found: dict[str, str] = {}
    for name, shape, dtype in items:
        integer = dtype.startswith("int")
        if len(shape) == 1 and integer:
            found["num_detections"] = name
        elif len(shape) == 3 and shape[-1] == 4 and not integer:
            found["boxes"] = name
        elif len(shape) == 2 and integer:
            found["classes"] = name
        elif len(shape) == 2:
            found["scores"] = name
    return found if len(found) == 4 else None


def yolox_grid_count(input_size: tuple[int, int], strides: Sequence[int]) -> int:
    """Rows of a raw YOLOX head: sum of (H // s) x (W // s) (demo_postprocess's grids)."""
    height, width = input_size
    return sum((height // s) * (width // s) for s in strides)


def yolox_grid(input_size: tuple[int, int], strides: Sequence[int]
               ) -> tuple[np.ndarray, np.ndarray]:
    """(cell x, y [N, 2], stride [N, 1]) in demo_postprocess's order: stride, row, column."""
    height, width = input_size
    cells, scales = [], []
    for s in strides:
        xs, ys = np.meshgrid(np.arange(width // s), np.arange(height // s))
        cells.append(np.stack((xs, ys), 2).reshape(-1, 2))
        scales.append(np.full((cells[-1].shape[0], 1), s))
    return (np.concatenate(cells).astype(np.float32),
            np.concatenate(scales).astype(np.float32))


def pico_stride(input_size: tuple[int, int], rows: int) -> int | None:
    """The stride whose grid has ``rows`` cells: ceil(H / s) x ceil(W / s), s a power of two."""
    height, width = input_size
    for power in range(1, 9):
        s = 1 << power
        if math.ceil(height / s) * math.ceil(width / s) == rows:
            return s
    return None


def pico_centres(input_size: tuple[int, int], stride: int) -> np.ndarray:
    """Cell centres [N, 2] in input pixels, ((column, row) + 0.5) x stride, row-major.

    PaddleDetection's PicoDetPostProcess (deploy/python/picodet_postprocess.py) and PicoHeadV2
    with ``cell_offset: 0.5`` both put the anchor point at the cell centre.
    """
    height, width = input_size
    xs, ys = np.meshgrid(np.arange(math.ceil(width / stride)),
                         np.arange(math.ceil(height / stride)))
    return ((np.stack((xs.ravel(), ys.ravel()), 1) + 0.5) * stride).astype(np.float32)
