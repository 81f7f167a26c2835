"""The output layout of a model that carries no app info, told from its output shapes.

The four YoloHead outputs; ``[1, a, b]`` with ``a = 4 + C`` (v8) or ``b = 5 + C`` (v5) when C is
known, else the longer axis holds the boxes (as ``edgefuse.metrics.detect.decode_yolo`` tells them
apart); ``[1, C, H, W]`` logits (one channel: a sigmoid mask), ``[1, H, W, C]`` when the last
axis is the class axis (it matches the class count, or is the only short one); integer maps for
argmax outputs; ``[1, K]`` a classifier; a YOLOv8-seg's two outputs, ``[1, 4+C+M, N]`` and
``[1, M, h, w]`` prototypes, ``yolov8_seg``.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgefuse.vision.detect.decode import head_outputs


def detect_layout(outputs: Sequence[tuple[str, tuple, str]],
                  num_classes: int | None = None) -> str | None:
    """The layout of (name, shape, dtype name) outputs; None when the shapes cannot tell."""
    if head_outputs(outputs) is not None:
        return "yolo_head"
    if _yolov8_seg(outputs):
        return "yolov8_seg"
    for _, shape, dtype in outputs:
        if not all(isinstance(d, int) for d in shape):
            continue
        integer = dtype.startswith("int") or dtype.startswith("uint")
        if len(shape) == 2:
            return "logits"
        if len(shape) == 4:
            return "seg_argmax" if integer else _semantic_layout(shape, num_classes)
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


def _yolov8_seg(outputs: Sequence[tuple[str, tuple, str]]) -> bool:
    """Two float outputs, [1, 4+C+M, N] predictions and [1, M, h, w] prototypes."""
    if len(outputs) != 2:
        return False
    shapes = {len(shape): shape for _, shape, dtype in outputs if not dtype.startswith(("int",
                                                                                       "uint"))}
    rows, protos = shapes.get(3), shapes.get(4)
    if rows is None or protos is None:
        return False
    channels, coefficients = rows[1], protos[1]
    return (isinstance(channels, int) and isinstance(coefficients, int)
            and channels > 4 + coefficients)


def _semantic_layout(shape: tuple, num_classes: int | None) -> str:
    """``[1, C, h, w]`` unless the last axis is the class axis: it holds ``num_classes`` (or a
    one-channel mask's 1) and axis 1 does not, or it is shorter than both other axes."""
    _, first, height, last = shape
    if 1 in (first, last):
        return "seg_sigmoid"
    if num_classes and last == num_classes != first:
        return "seg_logits_nhwc"
    if num_classes and first == num_classes:
        return "seg_logits"
    return "seg_logits_nhwc" if last < min(first, height) else "seg_logits"
