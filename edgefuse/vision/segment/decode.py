"""Semantic segmentation outputs to a class map in frame pixels: scores, one-channel masks, ids.

Layouts (contracts.md):

- ``seg_logits`` ``[1, C, h, w]`` and ``seg_logits_nhwc`` ``[1, h, w, C]``: class scores, logits
  or probabilities alike (the argmax does not care); the class is the argmax;
- ``seg_sigmoid`` ``[1, 1, h, w]`` (or ``[1, h, w, 1]``): one foreground class (salient-object,
  person, binary models). Foreground where the probability is above ``threshold`` (0.5): on the
  value itself when the graph ends in Sigmoid (``activation="sigmoid"``), on the logit
  ``log(t / (1 - t))`` (0 for 0.5) when it gives logits (``"none"``). Reading probabilities as
  logits makes every pixel foreground (sigmoid > 0 everywhere), the bug this module exists to
  prevent; class 0 is the background, 1 the foreground;
- ``seg_argmax`` ``[1, h, w]``, ``[1, 1, h, w]`` or ``[1, h, w, 1]``: integer class ids (graphs
  that end in ArgMax, such as TF DeepLab on Ascend).

The way back to the frame (mmsegmentation's ``resize`` of ``seg_logits`` then argmax, and
Ultralytics' ``process_mask``: scores are upsampled, never the decision): scores smaller (or
larger) than the model input are resized bilinearly, half-pixel centres as PyTorch's
``interpolate(..., align_corners=False)`` and OpenCV's ``INTER_LINEAR``, to the model input;
the letterbox padding is cut; the argmax (or threshold) is taken on the frame's part of the
input only; the class map is resized to the frame with nearest neighbour. Argmax-after-resize
keeps class borders where the scores cross, instead of a staircase of the model's output grid.
Class-id maps cannot be interpolated: they are resized with nearest neighbour.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from edgefuse._cv import cv2
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import ACTIVATIONS
from edgefuse.preprocess import Geometry

LAYOUTS = ("seg_logits", "seg_logits_nhwc", "seg_sigmoid", "seg_argmax")
# OpenCV resizes at most this many channels at once (CV_CN_MAX).
_CV_CHANNELS = 512


@dataclasses.dataclass
class Segmentation:
    """A frame's class map [h, w] (uint8 for up to 256 classes) and its number of classes."""

    class_map: np.ndarray
    num_classes: int

    def pixel_counts(self) -> np.ndarray:
        """Pixels per class id, [num_classes]."""
        return np.bincount(self.class_map.ravel(), minlength=self.num_classes)[:self.num_classes]


def decode(output: np.ndarray, layout: str, geometry: Geometry, *,
           num_classes: int | None = None, threshold: float = 0.5,
           activation: str = "none") -> Segmentation:
    """The model's segmentation output -> the class map at the frame's size.

    ``num_classes`` only matters for ``seg_argmax`` maps, whose outputs do not say it;
    ``activation`` (``sigmoid``, ``softmax``, ``none``) only for one-channel masks.
    """
    rows, columns = geometry.content_slices()
    if layout in ("seg_logits", "seg_logits_nhwc"):
        scores = to_input_size(channels_last(output, layout), geometry)
        classes = scores.shape[2]
        class_map = scores[rows, columns].argmax(axis=2)
    elif layout == "seg_sigmoid":
        scores = channels_last(output, layout)
        if scores.shape[2] != 1:
            raise InputError(f"a seg_sigmoid output has one channel, got {list(output.shape)}",
                             hint="use layout seg_logits for several classes",
                             reference=Ref.BAD_LAYOUT)
        cut = foreground_cut(threshold, activation)
        classes = 2
        class_map = to_input_size(scores, geometry)[rows, columns, 0] > cut
    elif layout == "seg_argmax":
        ids = _class_ids(output)
        if ids.shape != geometry.dst_size:
            height, width = geometry.dst_size
            ids = cv2().resize(ids, (width, height), interpolation=cv2().INTER_NEAREST)
        class_map = ids[rows, columns]
        classes = num_classes or int(class_map.max(initial=0)) + 1
    else:
        raise InputError(f"unknown segmentation layout '{layout}'",
                         hint=f"one of: {', '.join(LAYOUTS)}, yolov8_seg",
                         reference=Ref.BAD_LAYOUT)
    dtype = np.uint8 if classes <= 256 else np.int32
    return Segmentation(geometry.mask_to_frame(class_map.astype(dtype)), classes)


def foreground_cut(threshold: float, activation: str) -> float:
    """The value a one-channel score must exceed to be foreground at probability ``threshold``."""
    if not 0 < threshold < 1:
        raise InputError(f"the mask threshold must be in (0, 1), got {threshold}",
                         reference=Ref.BAD_CONFIG)
    if activation == "sigmoid":
        return threshold
    if activation == "none":
        return math.log(threshold / (1 - threshold))
    if activation == "softmax":
        raise InputError("a one-channel output cannot be a softmax (it would be 1 everywhere)",
                         hint="set activation: sigmoid (probabilities) or none (logits)",
                         reference=Ref.BAD_CONFIG)
    raise InputError(f"unknown activation '{activation}'", hint=f"one of {', '.join(ACTIVATIONS)}",
                     reference=Ref.BAD_CONFIG)


def channels_last(output: np.ndarray, layout: str) -> np.ndarray:
    """A ``[1, C, h, w]`` or ``[1, h, w, C]`` output as float32 ``[h, w, C]``.

    A one-channel mask may come either way: ``[1, 1, h, w]`` or ``[1, h, w, 1]``.
    """
    if output.ndim != 4 or output.shape[0] != 1:
        expected = "[1, h, w, C]" if layout == "seg_logits_nhwc" else "[1, C, h, w]"
        raise InputError(f"a {layout} output is {expected}, got {list(output.shape)}",
                         reference=Ref.BAD_LAYOUT)
    scores = output[0].astype(np.float32, copy=False)
    nhwc = layout == "seg_logits_nhwc" or (
        layout == "seg_sigmoid" and output.shape[3] == 1 and output.shape[1] != 1)
    return scores if nhwc else scores.transpose(1, 2, 0)


def to_input_size(scores: np.ndarray, geometry: Geometry) -> np.ndarray:
    """``[h, w, C]`` scores resized bilinearly (half-pixel centres) to the model input's size."""
    height, width = geometry.dst_size
    if scores.shape[:2] == (height, width):
        return scores
    if scores.shape[2] <= _CV_CHANNELS:
        return _resize(scores, width, height)
    return np.concatenate([_resize(scores[..., i:i + _CV_CHANNELS], width, height)
                           for i in range(0, scores.shape[2], _CV_CHANNELS)], axis=2)


def _resize(scores: np.ndarray, width: int, height: int) -> np.ndarray:
    resized = cv2().resize(np.ascontiguousarray(scores), (width, height),
                           interpolation=cv2().INTER_LINEAR)
    return resized.reshape(height, width, scores.shape[2])


def _class_ids(output: np.ndarray) -> np.ndarray:
    shape = list(output.shape)
    if output.ndim == 4 and output.shape[0] == 1 and 1 in (output.shape[1], output.shape[3]):
        ids = output[0, 0] if output.shape[1] == 1 else output[0, ..., 0]
    elif output.ndim == 3 and output.shape[0] == 1:
        ids = output[0]
    else:
        raise InputError(f"a seg_argmax output is [1, h, w] or [1, 1, h, w], got {shape}",
                         reference=Ref.BAD_LAYOUT)
    if not np.issubdtype(ids.dtype, np.integer):
        ids = ids.astype(np.int64)
    # OpenCV's nearest resize takes up to 32-bit ids; class ids fit easily.
    return np.ascontiguousarray(ids.astype(np.int32 if ids.max(initial=0) > 255 else np.uint8))
