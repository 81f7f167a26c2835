"""The output layout of a model that carries no app info, told from its output shapes.

The four YoloHead outputs; ``[1, a, b]`` with ``a = 4 + C`` (v8) or ``b = 5 + C`` (v5) when C is
known, else the longer axis holds the boxes (as ``edgefuse.metrics.detect.decode_yolo`` tells them
apart); ``[1, C, H, W]`` logits (one channel: a sigmoid mask); integer maps for argmax outputs;
``[1, K]`` a classifier.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgefuse.vision.detect.decode import head_outputs


def detect_layout(outputs: Sequence[tuple[str, tuple, str]],
                  num_classes: int | None = None) -> str | None:
    """The layout of (name, shape, dtype name) outputs; None when the shapes cannot tell."""
    if head_outputs(outputs) is not None:
        return "yolo_head"
    for _, shape, dtype in outputs:
        if not all(isinstance(d, int) for d in shape):
            continue
        integer = dtype.startswith("int") or dtype.startswith("uint")
        if len(shape) == 2:
            return "logits"
        if len(shape) == 4:
            return "seg_argmax" if integer else ("seg_sigmoid" if shape[1] == 1 else "seg_logits")
        if len(shape) == 3 and integer:
            return "seg_argmax"
        if len(shape) == 3:
            return _yolo_layout(shape, num_classes)
    return None


def _yolo_layout(shape: tuple, num_classes: int | None) -> str | None:
    _, a, b = shape
    if num_classes:
        if a == 4 + num_classes and b != 5 + num_classes:
            return "yolov8"
        if b == 5 + num_classes and a != 4 + num_classes:
            return "yolov5"
    if a < b:
        return "yolov8"
    if a > b:
        return "yolov5"
    return None
