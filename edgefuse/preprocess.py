"""Frames to model inputs: letterbox or stretch, colour order, normalisation, layout, geometry.

Why the geometry is a record and not code: four incompatible letterbox variants exist in the
reference apps (Ultralytics centred/114, rknn centred/0, Ascend DVPP top-left, numpy top-left/0;
see shared/reference/apps-and-pipelines.md §0.3), and post-processing that assumes the wrong one
silently shifts every box. Each frame's ``Geometry`` says exactly what was done (scale, pad
left/top, pad value, centred or not, source and model size) and inverts itself, so the boxes are
mapped back with the numbers that made the input, not with a second guess.

Letterbox follows Ultralytics ``LetterBox`` (ultralytics/data/augment.py, ``auto=False``,
``scaleup=True``): ``r = min(H / h, W / w)``, content ``round(w r) x round(h r)`` resized with
``cv2.INTER_LINEAR``, the padding split in half when centred with the odd pixel right/bottom
(``round(d - 0.1)``, ``round(d + 0.1)``), all of it right/bottom when pasted top-left. The inverse
is Ultralytics' ``scale_boxes``: subtract the pad, divide by the scale, clip to the frame.

Two exporters size and resample differently, and a one-pixel or one-kernel difference changes
the detections (issue 33): ``rounding: floor`` sizes the content ``int(w r) x int(h r)`` as
YOLOX's ``preproc`` (yolox/data/data_augment.py) does, and ``interpolation`` names the OpenCV
kernel (PaddleDetection's ``Resize`` defaults to ``interp: 2``, ``cv2.INTER_CUBIC``).

Every step can write into memory it is given (``fit_into``, ``to_tensor(..., out=)``): the
resize lands straight in its place inside the padded frame (``cv2.resize`` with ``dst=`` a view),
only the padding is filled, and the tensor is written into the session's own input buffer
(``Session.input_buffers``), so a frame costs no full-frame copy beyond the writes it needs.
The results are the same bytes as ``fit`` and ``to_tensor`` without ``out``.

The record (contracts.md, "Preprocessing record") is ``Preprocess``; the model input is
``(pixel * scale - mean) / std`` per channel in the model's colour order, computed as one
multiply-add per element. ``dtype: uint8`` means the model takes the raw frame (an AIPP build, a
graph that normalises itself): then scale, mean and std must be the identity.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from edgefuse import _records as rec
from edgefuse._cv import cv2
from edgefuse.errors import Ref

RESIZES = ("letterbox", "stretch")
COLORS = ("RGB", "BGR")
LAYOUTS = ("NCHW", "NHWC")
DTYPES = ("float32", "float16", "uint8")
# OpenCV's interpolation flags by name (the numbers are cv2's, as PaddleDetection's ``interp``).
INTERPOLATIONS = {"nearest": 0, "linear": 1, "cubic": 2, "area": 3, "lanczos": 4}
ROUNDINGS = ("round", "floor")
# The ImageNet statistics that torchvision-style and PP-OCR models normalise RGB in [0, 1] with.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_REF = Ref.BAD_PREPROCESS


@dataclasses.dataclass(frozen=True)
class Preprocess:
    """How a BGR uint8 frame becomes the model's input (the contracts.md record)."""

    size: tuple[int, int]  # model input (height, width)
    resize: str = "letterbox"
    pad_value: int = 114
    center: bool = True
    color: str = "RGB"
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    layout: str = "NCHW"
    dtype: str = "float32"
    interpolation: str = "linear"
    rounding: str = "round"  # the letterbox content size: round(w r) or int(w r)

    def __post_init__(self) -> None:
        self._check("")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: Preprocess | None = None,
                  where: str = "") -> Preprocess:
        """The record from plain data; keys not given keep ``base``'s values (or the defaults)."""
        rec.check_mapping(data, where, _REF)
        rec.check_keys(data, [f.name for f in dataclasses.fields(cls)], where, _REF)
        merged = base.to_dict() if base is not None else {}
        merged.update(data)
        if "size" not in merged:
            raise rec.bad("the preprocess record needs 'size' [height, width]", where, _REF)
        record = cls.__new__(cls)
        values = {
            "size": rec.numbers(merged["size"], "size", 2, where, _REF, integer=True, low=1),
            "mean": rec.numbers(merged.get("mean", 0.0), "mean", 3, where, _REF),
            "std": rec.numbers(merged.get("std", 1.0), "std", 3, where, _REF),
        }
        for field in dataclasses.fields(cls):
            value = values.get(field.name, merged.get(field.name, field.default))
            object.__setattr__(record, field.name, value)
        record._check(where)
        return record

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Preprocess:
        """The record in a YAML or JSON file (the keys of ``to_dict``)."""
        return cls.from_dict(rec.read_yaml(path, "preprocess record", _REF) or {},
                             where=str(path))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def _check(self, where: str) -> None:
        rec.numbers(self.size, "size", 2, where, _REF, integer=True, low=1)
        rec.choice(self.resize, "resize", RESIZES, where, _REF)
        rec.number(self.pad_value, "pad_value", where, _REF, low=0, high=255, integer=True)
        rec.boolean(self.center, "center", where, _REF)
        rec.choice(self.color, "color", COLORS, where, _REF)
        rec.number(self.scale, "scale", where, _REF)
        rec.numbers(self.mean, "mean", 3, where, _REF)
        rec.numbers(self.std, "std", 3, where, _REF)
        if self.scale <= 0 or any(s == 0 for s in self.std):
            raise rec.bad("'scale' must be > 0 and 'std' must not contain 0", where, _REF)
        rec.choice(self.layout, "layout", LAYOUTS, where, _REF)
        rec.choice(self.dtype, "dtype", DTYPES, where, _REF)
        rec.choice(self.interpolation, "interpolation", tuple(INTERPOLATIONS), where, _REF)
        rec.choice(self.rounding, "rounding", ROUNDINGS, where, _REF)
        identity = self.scale == 1 and self.mean == (0, 0, 0) and self.std == (1, 1, 1)
        if self.dtype == "uint8" and not identity:
            raise rec.bad(
                "a uint8 model input takes the raw frame: 'scale' must be 1, 'mean' 0 and 'std' 1",
                where, _REF, hint="the model (or its AIPP) normalises; do not do it twice")

    def __call__(self, frame: np.ndarray) -> tuple[np.ndarray, Geometry]:
        """The model input (batch of one) for a BGR uint8 ``frame``, and how it was made."""
        image, geometry = fit(frame, self)
        return to_tensor(image, self), geometry


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Where a frame went in the model input: model = frame * scale + pad (per axis)."""

    src_size: tuple[int, int]  # frame (height, width)
    dst_size: tuple[int, int]  # model input (height, width)
    scale_x: float
    scale_y: float
    pad_left: int = 0
    pad_top: int = 0
    pad_value: int = 114
    center: bool = True
    resize: str = "letterbox"
    rounding: str = "round"

    @property
    def scale(self) -> float:
        """The letterbox ratio r (both axes); a stretch has one per axis."""
        return self.scale_x

    @property
    def content_size(self) -> tuple[int, int]:
        """(height, width) of the resized frame inside the model input, padding excluded."""
        h, w = self.src_size
        if self.resize == "stretch":
            return self.dst_size
        return _content(h, self.scale_y, self.rounding), _content(w, self.scale_x, self.rounding)

    def to_frame(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in model-input pixels -> frame pixels, clipped to the frame (float32)."""
        out = np.array(boxes, dtype=np.float32).reshape(-1, 4)
        h, w = self.src_size
        out[:, 0::2] = np.clip((out[:, 0::2] - self.pad_left) / self.scale_x, 0, w)
        out[:, 1::2] = np.clip((out[:, 1::2] - self.pad_top) / self.scale_y, 0, h)
        return out

    def to_model(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in frame pixels -> model-input pixels (no clipping)."""
        out = np.array(boxes, dtype=np.float32).reshape(-1, 4)
        out[:, 0::2] = out[:, 0::2] * self.scale_x + self.pad_left
        out[:, 1::2] = out[:, 1::2] * self.scale_y + self.pad_top
        return out

    def content_slices(self) -> tuple[slice, slice]:
        """(rows, columns) of the model input that hold the frame, padding excluded."""
        content_h, content_w = self.content_size
        return (slice(self.pad_top, self.pad_top + content_h),
                slice(self.pad_left, self.pad_left + content_w))

    def mask_to_frame(self, mask: np.ndarray) -> np.ndarray:
        """A [H, W] map at model resolution -> [h, w] at the frame's, padding cut, nearest.

        ``mask`` may already be cut to ``content_slices()``.
        """
        rows, columns = self.content_slices()
        content = mask if mask.shape == self.content_size else mask[rows, columns]
        h, w = self.src_size
        if content.shape == (h, w):
            return np.ascontiguousarray(content)
        return cv2().resize(np.ascontiguousarray(content), (w, h),
                            interpolation=cv2().INTER_NEAREST)

    def to_dict(self) -> dict[str, Any]:
        """The contracts.md form; a stretch records its per-axis scale as [x, y]."""
        scale = self.scale_x if self.resize == "letterbox" else [self.scale_x, self.scale_y]
        return {"resize": self.resize, "scale": scale, "pad_left": self.pad_left,
                "pad_top": self.pad_top, "pad_value": self.pad_value, "center": self.center,
                "src_size": list(self.src_size), "dst_size": list(self.dst_size)}


def _content(length: int, ratio: float, rounding: str) -> int:
    return int(length * ratio) if rounding == "floor" else int(round(length * ratio))


def letterbox_sizes(src: tuple[int, int], dst: tuple[int, int], center: bool = True,
                    rounding: str = "round") -> tuple[float, tuple[int, int], tuple[int, int]]:
    """The letterbox's numbers for a (height, width) frame into (height, width): the ratio,
    the content's (width, height) and the pad's (left, top); the DVPP path uses them too."""
    (h, w), (height, width) = src, dst
    r = min(height / h, width / w)
    new_w, new_h = _content(w, r, rounding), _content(h, r, rounding)
    dw, dh = float(width - new_w), float(height - new_h)
    if center:
        dw, dh = dw / 2, dh / 2
    top = int(round(dh - 0.1)) if center else 0
    left = int(round(dw - 0.1)) if center else 0
    return r, (new_w, new_h), (left, top)


def letterbox(frame: np.ndarray, size: tuple[int, int], pad_value: int = 114,
              center: bool = True, interpolation: str = "linear",
              rounding: str = "round") -> tuple[np.ndarray, Geometry]:
    """Resize keeping the aspect ratio and pad to ``size`` (height, width); see the docstring."""
    h, w = frame.shape[:2]
    height, width = size
    r, (new_w, new_h), (left, top) = letterbox_sizes((h, w), size, center, rounding)
    if (new_w, new_h) != (w, h):
        frame = cv2().resize(frame, (new_w, new_h), interpolation=INTERPOLATIONS[interpolation])
    bottom, right = height - new_h - top, width - new_w - left
    if top or bottom or left or right:
        frame = cv2().copyMakeBorder(frame, top, bottom, left, right, cv2().BORDER_CONSTANT,
                                     value=(pad_value,) * 3)
    geometry = Geometry((h, w), (height, width), r, r, left, top, pad_value, center,
                        rounding=rounding)
    return frame, geometry


def stretch(frame: np.ndarray, size: tuple[int, int],
            interpolation: str = "linear") -> tuple[np.ndarray, Geometry]:
    """Plain resize to ``size`` (height, width), aspect ratio not kept."""
    h, w = frame.shape[:2]
    height, width = size
    if (h, w) != (height, width):
        frame = cv2().resize(frame, (width, height), interpolation=INTERPOLATIONS[interpolation])
    return frame, Geometry((h, w), (height, width), width / w, height / h, 0, 0, 0, False,
                           "stretch")


def fit_into(frame: np.ndarray, record: Preprocess, out: np.ndarray) -> Geometry:
    """``fit`` written into ``out``, an (H, W, 3) uint8 array (a view is fine): the frame is
    resized straight into its place, the padding filled around it; nothing else is allocated."""
    h, w = frame.shape[:2]
    height, width = out.shape[:2]
    flag = INTERPOLATIONS[record.interpolation]
    if record.resize == "stretch":
        _resize_into(frame, out, flag)
        return Geometry((h, w), (height, width), width / w, height / h, 0, 0, 0, False,
                        "stretch")
    r, (new_w, new_h), (left, top) = letterbox_sizes((h, w), (height, width), record.center,
                                                     record.rounding)
    _resize_into(frame, out[top:top + new_h, left:left + new_w], flag)
    value = record.pad_value
    out[:top] = value
    out[top + new_h:] = value
    out[top:top + new_h, :left] = value
    out[top:top + new_h, left + new_w:] = value
    return Geometry((h, w), (height, width), r, r, left, top, value, record.center,
                    rounding=record.rounding)


def _resize_into(frame: np.ndarray, dst: np.ndarray, interpolation: int) -> None:
    if frame.shape[:2] == dst.shape[:2]:
        np.copyto(dst, frame)
        return
    written = cv2().resize(frame, (dst.shape[1], dst.shape[0]), dst=dst,
                           interpolation=interpolation)
    if not np.may_share_memory(written, dst):  # OpenCV could not write that view in place
        np.copyto(dst, written)


def fit(frame: np.ndarray, record: Preprocess) -> tuple[np.ndarray, Geometry]:
    """The frame resized as ``record`` says (still BGR uint8 HWC)."""
    if record.resize == "stretch":
        return stretch(frame, record.size, record.interpolation)
    return letterbox(frame, record.size, record.pad_value, record.center, record.interpolation,
                     record.rounding)


def to_tensor(image: np.ndarray, record: Preprocess, out: np.ndarray | None = None) -> np.ndarray:
    """A fitted BGR uint8 image -> the model input, batch of one, in one pass where it can;
    written into ``out`` (the input's shape and dtype, e.g. a session's input buffer) if given."""
    order = [2, 1, 0] if record.color == "RGB" else [0, 1, 2]
    if record.dtype == "uint8":
        pixels = image[..., order] if record.color == "RGB" else image
        pixels = pixels.transpose(2, 0, 1) if record.layout == "NCHW" else pixels
        if out is None:
            return np.ascontiguousarray(pixels)[np.newaxis]
        np.copyto(out[0], pixels)
        return out
    std = np.asarray(record.std, dtype=np.float32)
    gain = np.float32(record.scale) / std
    offset = -np.asarray(record.mean, dtype=np.float32) / std
    height, width = image.shape[:2]
    shape = (1, 3, height, width) if record.layout == "NCHW" else (1, height, width, 3)
    direct = out is not None and record.dtype == "float32"
    result = out if direct else np.empty(shape, np.float32)
    if record.layout == "NCHW":
        np.multiply(image.transpose(2, 0, 1)[order], gain[:, None, None], out=result[0])
        if offset.any():
            result[0] += offset[:, None, None]
    else:
        np.multiply(image[..., order], gain, out=result[0])
        if offset.any():
            result[0] += offset
    if direct:
        return result
    if out is None:
        return result.astype(np.float16) if record.dtype == "float16" else result
    np.copyto(out, result, casting="same_kind")  # float16: rounded once, as astype does
    return out
