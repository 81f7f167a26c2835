"""Tiny ONNX models and clips for the vision tests, built with onnx.helper and OpenCV.

``constant_model`` returns a hand-made output whatever the frame (plus 0 x the input, so the
input is used): decode tests know every number. ``red_mask_model`` and ``channel_logits_model``
compute from the pixels, so a double (or missing) normalisation or a swapped channel order
changes their answer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

OPSET = 17
IR_VERSION = 10


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = oh.make_graph(list(nodes), "tiny", list(inputs), list(outputs), list(initializers))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                          ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def constant_model(output: np.ndarray, size: int = 32, name: str = "output0") -> onnx.ModelProto:
    """[1, 3, size, size] float32 -> ``output`` (any shape, float32)."""
    output = np.asarray(output, dtype=np.float32)
    nodes = [
        oh.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
        oh.make_node("Mul", ["mean", "zero"], ["nothing"]),
        oh.make_node("Add", ["value", "nothing"], [name]),
    ]
    inits = [numpy_helper.from_array(output, "value"),
             numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    return _model(nodes, [oh.make_tensor_value_info("images", TensorProto.FLOAT,
                                                    [1, 3, size, size])],
                  [oh.make_tensor_value_info(name, TensorProto.FLOAT, list(output.shape))], inits)


def red_mask_model(size: int = 32) -> onnx.ModelProto:
    """RGB [1, 3, H, W] in 0..1 -> [1, 1, H, W] logit ``R - 0.5``: foreground where R > 0.5."""
    nodes = [
        oh.make_node("Slice", ["images", "start", "end", "axis"], ["red"]),
        oh.make_node("Sub", ["red", "half"], ["mask"]),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "start"),
             numpy_helper.from_array(np.array([1], np.int64), "end"),
             numpy_helper.from_array(np.array([1], np.int64), "axis"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return _model(nodes, [oh.make_tensor_value_info("images", TensorProto.FLOAT,
                                                    [1, 3, size, size])],
                  [oh.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, size, size])],
                  inits)


def channel_logits_model(size: int = 32) -> onnx.ModelProto:
    """[1, 3, H, W] -> the same as 3-class logits: each pixel's class is its strongest channel."""
    nodes = [oh.make_node("Identity", ["images"], ["logits"])]
    return _model(nodes, [oh.make_tensor_value_info("images", TensorProto.FLOAT,
                                                    [1, 3, size, size])],
                  [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3, size, size])])


def yolov8_output(classes: int = 2, anchors: int = 64) -> np.ndarray:
    """[1, 4 + classes, anchors]: three boxes in a 32 x 32 input, the rest below any threshold.

    Box 0: (8, 8)-(24, 24) class 0 score 0.9; box 1: the same shifted 1 px, class 0 score 0.8
    (suppressed, IoU 0.88); box 2: (2, 2)-(6, 6) class 1 score 0.7.
    """
    out = np.zeros((1, 4 + classes, anchors), np.float32)
    out[0, :4, 0], out[0, 4, 0] = [16, 16, 16, 16], 0.9
    out[0, :4, 1], out[0, 4, 1] = [17, 16, 16, 16], 0.8
    out[0, :4, 2], out[0, 5, 2] = [4, 4, 4, 4], 0.7
    return out


def brightness_box_model(size: int = 32, box: tuple[float, float, float] = (16, 16, 8),
                         anchors: int = 8) -> onnx.ModelProto:
    """A yolov8-layout detector of 2 classes ([1, 3, size, size] -> [1, 6, anchors]) that finds
    one object (class 0, score 0.9) whose centre x is ``size`` x the mean of the input's lower
    half: a flat grey frame of level v puts it at v / 255 of the width. A test (or a live
    camera on 127.0.0.1) moves the object by the frame's brightness; the upper half is left out,
    so the frame number strip of ``edgefuse.testing.mjpeg`` does not move it. ``box``: its centre y,
    width and height, in input pixels."""
    centre_y, width, height = box
    value = np.zeros((1, 6, anchors), np.float32)
    value[0, 1:5, 0] = [centre_y, width, height, 0.9]
    direction = np.zeros((1, 6, anchors), np.float32)
    direction[0, 0, 0] = size
    nodes = [
        oh.make_node("Slice", ["images", "start", "end", "axis"], ["lower"]),
        oh.make_node("ReduceMean", ["lower"], ["mean"], keepdims=0),
        oh.make_node("Mul", ["mean", "direction"], ["moved"]),
        oh.make_node("Add", ["value", "moved"], ["output0"]),
    ]
    inits = [numpy_helper.from_array(np.array([size // 2], np.int64), "start"),
             numpy_helper.from_array(np.array([size], np.int64), "end"),
             numpy_helper.from_array(np.array([2], np.int64), "axis"),
             numpy_helper.from_array(value, "value"),
             numpy_helper.from_array(direction, "direction")]
    return _model(nodes, [oh.make_tensor_value_info("images", TensorProto.FLOAT,
                                                    [1, 3, size, size])],
                  [oh.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, anchors])],
                  inits)


def write_clip(path: Path, frames: int = 12, size: tuple[int, int] = (48, 64),
               fps: float = 10.0) -> list[np.ndarray]:
    """An mp4 of a white square moving right on grey; returns the frames as decoded back."""
    import cv2  # noqa: PLC0415 - tests that need OpenCV import it

    height, width = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    for i in range(frames):
        frame = np.full((height, width, 3), 60, np.uint8)
        cv2.rectangle(frame, (2 + 2 * i, 10), (14 + 2 * i, 22), (255, 255, 255), -1)
        writer.write(frame)
    writer.release()
    capture = cv2.VideoCapture(str(path))
    decoded = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        decoded.append(frame)
    capture.release()
    return decoded
