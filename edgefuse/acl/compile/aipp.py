"""AIPP: the board's image preprocessing, as a static ``aipp.cfg`` and as the same math in numpy.

Why both from one spec: on the board the AI Core turns the camera's uint8 frame into the model's
float input (swap, crop, colour-space conversion, mean/scale); on a laptop the host backends must
do exactly that in numpy, or the two disagree before the model even runs. One ``AippSpec`` writes
the ``--insert_op_conf`` file and emulates it.

The spec (YAML or dict), in the model's terms::

    input_format: BGR888          # RGB888 | BGR888 | YUV420SP (NV12) | YVU420SP (NV21)
    source_size: [640, 480]       # width, height of the uint8 frame handed to the model
    crop: [0, 0, 640, 480]        # optional x, y, width, height; must equal the model's W, H
    model_color: RGB              # channel order the model was trained with: RGB | BGR
    mean: [123.675, 116.28, 103.53]  # per model channel, 0..255 pixel units (default 0)
    std: [58.395, 57.12, 57.375]  # per model channel, pixel units ...
    scale: 0.00392156862745098    # ... or a multiplier (one or three values) instead of std
    csc: jpeg                     # YUV only: jpeg (default) | bt601_narrow | bt709_narrow
    input: images                 # optional model input it applies to (default: the first)

so the model input is ``(pixel - mean) / std`` (or ``* scale``) in ``model_color`` order.

AIPP semantics (CANN ATC guide, AIPP chapter: canncommercial/800 devaids/atc/atlasatc_16_0021..28):
- Order: channel swap (``rbuv_swap_switch``) -> crop -> CSC -> mean/normalize -> padding
  (atlasatc_16_0025, "Configuration File Template", general restriction 4).
- CSC: ``out = M @ (in - input_bias) >> 8`` with ``M = matrix_r{i}c{j}``; row i of M yields
  output channel i (atlasatc_16_0021, "CSC Configuration"; the YUV->BGR example atlasatc_16_0028
  reorders the rows). Matrices used here, from atlasatc_16_0021 / atlasmcg_05_c30_0009:
  JPEG (BT.601 full range) 256,0,359 / 256,-88,-183 / 256,454,0 bias 0,128,128;
  BT.601 narrow 298,0,409 / 298,-100,-208 / 298,516,0 bias 16,128,128;
  BT.709 narrow 298,0,459 / 298,-55,-136 / 298,541,0 bias 16,128,128.
- Normalization: ``pixel_out_chx(i) = [pixel_in_chx(i) - mean_chn_i - min_chn_i] * var_reci_chn_i``
  on channels after swap and CSC (atlasatc_16_0022; atlasatc_16_0028 comment). edgefuse writes
  the mean into ``min_chn`` (a float; ``mean_chn`` is an integer) as the ResNet-50 tutorial does.
- YUV420SP (NV12 by default, NV21 with ``rbuv_swap_switch: true``): ``load_start_pos``, crop size
  and source size must be even (aclAippInfo, canncommercial/850 aclpythondevg_01_0925); sizes are
  in [1, 4096]. The crop must equal the model input's W and H (atlasmcg_05_c30_0010).
- With AIPP the model input becomes uint8 NHWC (Ascend/samples growthpath 3_model_conversion).

Not documented, so marked where used: [INFERENCE] CSC results saturate to 0..255 (the data path
is 8-bit), and chroma of YUV420SP is shared by each 2x2 block (nearest, no interpolation).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from edgefuse._deps import require
from edgefuse.errors import InputError, Ref

MAX_IMAGE_SIDE = 4096

# Source pixel format -> (AIPP input_format, channel order of the uint8 frame, is YUV)
_FORMATS: dict[str, tuple[str, str, bool]] = {
    "RGB888": ("RGB888_U8", "RGB", False),
    "BGR888": ("RGB888_U8", "BGR", False),
    "YUV420SP": ("YUV420SP_U8", "NV12", True),
    "YVU420SP": ("YUV420SP_U8", "NV21", True),
}

# YUV -> RGB matrices (rows R, G, B) and input biases, atlasatc_16_0021.
CSC_PRESETS: dict[str, tuple[tuple[tuple[int, int, int], ...], tuple[int, int, int]]] = {
    "jpeg": (((256, 0, 359), (256, -88, -183), (256, 454, 0)), (0, 128, 128)),
    "bt601_narrow": (((298, 0, 409), (298, -100, -208), (298, 516, 0)), (16, 128, 128)),
    "bt709_narrow": (((298, 0, 459), (298, -55, -136), (298, 541, 0)), (16, 128, 128)),
}

# RGB -> YUV (rows Y, U, V; RGB in 0..255) and offsets: the inverses of CSC_PRESETS, from the
# standards behind them (JPEG/JFIF full-range BT.601; BT.601 and BT.709 video range).
_Rows = tuple[tuple[float, float, float], ...]
_RGB_TO_YUV: dict[str, tuple[_Rows, tuple[float, float, float]]] = {
    "jpeg": (((0.299, 0.587, 0.114), (-0.168736, -0.331264, 0.5), (0.5, -0.418688, -0.081312)),
             (0.0, 128.0, 128.0)),
    "bt601_narrow": (((65.481 / 255, 128.553 / 255, 24.966 / 255),
                      (-37.797 / 255, -74.203 / 255, 112.0 / 255),
                      (112.0 / 255, -93.786 / 255, -18.214 / 255)), (16.0, 128.0, 128.0)),
    "bt709_narrow": (((46.559 / 255, 156.629 / 255, 15.812 / 255),
                      (-25.664 / 255, -86.336 / 255, 112.0 / 255),
                      (112.0 / 255, -101.730 / 255, -10.270 / 255)), (16.0, 128.0, 128.0)),
}

_KEYS = {
    "input_format", "source_size", "crop", "model_color", "mean", "std", "scale", "csc", "input",
}


# the keys a spec must give, with what to write (the other keys have defaults)
_REQUIRED = {
    "input_format": "`input_format: BGR888` (RGB888 | BGR888 | YUV420SP | YVU420SP: the frames "
                    "handed to the model; YUV420SP for decode: dvpp)",
    "source_size": "`source_size: [WIDTH, HEIGHT]`, the size of the uint8 frame handed to the "
                   "model: its input's width and height, unless `crop` takes the model's window "
                   "out of a larger frame",
}


def _bad(message: str, hint: str | None = None) -> InputError:
    return InputError(message, hint=hint, reference=Ref.BAD_AIPP_SPEC)


@dataclasses.dataclass(frozen=True)
class AippSpec:
    """A static AIPP configuration in the model's terms (see the module docstring)."""

    input_format: str
    source_size: tuple[int, int]  # (width, height)
    crop: tuple[int, int, int, int] | None = None  # (x, y, width, height)
    model_color: str = "RGB"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] | None = None
    scale: tuple[float, float, float] | None = None
    csc: str = "jpeg"
    input: str | None = None

    def __post_init__(self) -> None:
        _validate(self)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AippSpec:
        """Build from a mapping with the YAML keys; unknown keys are errors, not ignored."""
        if not isinstance(data, Mapping):
            raise _bad("an AIPP spec must be a mapping of keys to values")
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise _bad(f"unknown AIPP spec keys {unknown}", hint=f"known: {sorted(_KEYS)}")
        for key, example in _REQUIRED.items():
            if key not in data:
                raise _bad(f"the AIPP spec needs '{key}'", hint=f"write {example}")
        return cls(
            input_format=str(data["input_format"]).upper(),
            source_size=_int_tuple(data["source_size"], 2, "source_size"),
            crop=_int_tuple(data["crop"], 4, "crop") if data.get("crop") is not None else None,
            model_color=str(data.get("model_color", "RGB")).upper(),
            mean=_per_channel(data.get("mean", 0.0), "mean"),
            std=_per_channel(data["std"], "std") if data.get("std") is not None else None,
            scale=_per_channel(data["scale"], "scale") if data.get("scale") is not None else None,
            csc=str(data.get("csc", "jpeg")).lower(),
            input=str(data["input"]) if data.get("input") is not None else None,
        )

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> AippSpec:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise _bad(f"cannot read the AIPP spec '{path}': {exc}") from exc
        return cls.from_dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (for the manifest), in the YAML's keys."""
        data = dataclasses.asdict(self)
        return {key: list(v) if isinstance(v, tuple) else v for key, v in data.items()}

    # ---- derived AIPP parameters --------------------------------------------------------------
    @property
    def is_yuv(self) -> bool:
        return _FORMATS[self.input_format][2]

    @property
    def output_size(self) -> tuple[int, int]:
        """(width, height) of what AIPP hands the model: the crop, or the whole frame."""
        return (self.crop[2], self.crop[3]) if self.crop else self.source_size

    @property
    def rbuv_swap(self) -> bool:
        """Swap R/B (RGB formats) or U/V (YUV formats) before anything else."""
        source_order = _FORMATS[self.input_format][1]
        if self.is_yuv:
            return source_order == "NV21"
        return source_order != self.model_color

    @property
    def csc_matrix(self) -> np.ndarray | None:
        """The 3x3 integer CSC matrix, rows in ``model_color`` order; None for RGB sources."""
        if not self.is_yuv:
            return None
        rows = np.array(CSC_PRESETS[self.csc][0], dtype=np.int64)
        return rows if self.model_color == "RGB" else rows[::-1].copy()

    @property
    def var_reci(self) -> tuple[float, float, float]:
        if self.std is not None:
            return tuple(1.0 / s for s in self.std)  # type: ignore[return-value]
        if self.scale is not None:
            return self.scale
        return (1.0, 1.0, 1.0)

    def frame_shape(self) -> tuple[int, ...]:
        """Shape of one uint8 frame: (H, W, 3) for RGB formats, (H * 3 / 2, W) for YUV420SP."""
        width, height = self.source_size
        return (height * 3 // 2, width) if self.is_yuv else (height, width, 3)

    def frame_from_bgr(self, image: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The uint8 frame this spec takes, made from an OpenCV BGR image of any size.

        The image is resized to ``source_size`` (unless it has that size); RGB888/BGR888 frames
        get that channel order, YUV420SP frames the Y plane and the interleaved chroma plane (UV
        for NV12, VU for NV21) in the colour space of ``csc``, chroma averaged over each 2x2
        block: the inverse of what ``emulate`` undoes, so a camera frame and an image file reach
        the model alike. With ``out`` (the frame's shape, e.g. a session's input buffer) the
        frame is written there instead of into a new array.
        """
        cv2 = require("cv2", extra="vision", purpose="Making AIPP frames from images")
        width, height = self.source_size
        image = np.asarray(image, dtype=np.uint8)
        if image.shape[:2] != (height, width):
            image = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
        source_order = _FORMATS[self.input_format][1]
        if not self.is_yuv:
            pixels = image if source_order == "BGR" else image[..., ::-1]
            if out is None:
                return np.array(pixels, order="C")  # a frame of its own, never the input
            np.copyto(out, pixels)
            return out
        rgb = image[..., ::-1].astype(np.float64)
        forward, offset = _RGB_TO_YUV[self.csc]
        yuv = rgb @ np.asarray(forward).T + np.asarray(offset)
        chroma = yuv[..., 1:].reshape(height // 2, 2, width // 2, 2, 2).mean(axis=(1, 3))
        if source_order == "NV21":
            chroma = chroma[..., ::-1]
        if out is None:
            out = np.empty((height * 3 // 2, width), np.uint8)
        # Rounded and clipped in float, then cast straight into the frame's two planes.
        for plane, values in ((out[:height], yuv[..., 0]),
                              (out[height:], chroma.reshape(height // 2, width))):
            rounded = np.rint(values)
            np.copyto(plane, np.clip(rounded, 0, 255, out=rounded), casting="unsafe")
        return out

    # ---- outputs ------------------------------------------------------------------------------
    def to_cfg(self, related_input_rank: int = 0, *, size_from_gears: bool = False) -> str:
        """The ``--insert_op_conf`` text (static AIPP, prototxt). ``size_from_gears``: the
        model has image-size gears, so the source size is written as 0 (each run's gear gives
        it), as CANN documents for static AIPP with --dynamic_image_size; crop is refused then
        (aclpythondevg_0044)."""
        if size_from_gears and self.crop is not None:
            raise _bad("static AIPP with image-size gears cannot crop (CANN: src_image_size_w/h "
                       "0, no crop, no padding)", hint="drop 'crop' from the AIPP spec")
        width, height = (0, 0) if size_from_gears else self.source_size
        size = "image-size gears" if size_from_gears else f"{width}x{height}"
        lines = [
            f"# Static AIPP for edgefuse spec: {self.input_format} {size} -> "
            f"{self.model_color}, model input = (pixel - mean) * var_reci",
            "aipp_op {",
            "    aipp_mode : static",
            f"    related_input_rank : {related_input_rank}",
            f"    input_format : {_FORMATS[self.input_format][0]}",
            f"    src_image_size_w : {width}",
            f"    src_image_size_h : {height}",
        ]
        if self.crop is not None:
            x, y, crop_w, crop_h = self.crop
            lines += [
                "    crop : true",
                f"    load_start_pos_w : {x}",
                f"    load_start_pos_h : {y}",
                f"    crop_size_w : {crop_w}",
                f"    crop_size_h : {crop_h}",
            ]
        matrix = self.csc_matrix
        lines.append(f"    csc_switch : {'true' if matrix is not None else 'false'}")
        lines.append(f"    rbuv_swap_switch : {'true' if self.rbuv_swap else 'false'}")
        if matrix is not None:
            for i in range(3):
                for j in range(3):
                    lines.append(f"    matrix_r{i}c{j} : {int(matrix[i, j])}")
            for i, bias in enumerate(CSC_PRESETS[self.csc][1]):
                lines.append(f"    input_bias_{i} : {bias}")
        for i, value in enumerate(self.mean):
            lines.append(f"    min_chn_{i} : {_number(value)}")
        for i, value in enumerate(self.var_reci):
            lines.append(f"    var_reci_chn_{i} : {_number(value)}")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def emulate(self, frame: np.ndarray, *, layout: str = "NCHW", fp16: bool = False) -> np.ndarray:
        """The model input AIPP makes from one uint8 ``frame``: float32, batch of one.

        ``frame`` is (H, W, 3) for RGB888/BGR888 and (H * 3 / 2, W) NV12/NV21 bytes for
        YUV420SP, at ``source_size``. ``fp16=True`` rounds to float16 first, as the AI Core's
        AIPP output is (its C0=16 "FP16" layout, atlasatc_16_0027), for board-exact comparisons.
        """
        if layout not in ("NCHW", "NHWC"):
            raise _bad(f"unknown layout '{layout}'", hint="NCHW or NHWC")
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.shape != self.frame_shape():
            raise _bad(
                f"frame is {frame.dtype}{list(frame.shape)}, the spec expects "
                f"uint8{list(self.frame_shape())}",
            )
        pixels = _yuv444(frame, self.source_size) if self.is_yuv else frame.astype(np.int64)
        if self.rbuv_swap:  # R<->B for RGB sources, U<->V for YUV sources
            pixels = pixels[..., [0, 2, 1]] if self.is_yuv else pixels[..., ::-1]
        if self.crop is not None:
            x, y, crop_w, crop_h = self.crop
            pixels = pixels[y : y + crop_h, x : x + crop_w]
        matrix = self.csc_matrix
        if matrix is not None:
            bias = np.array(CSC_PRESETS[self.csc][1], dtype=np.int64)
            pixels = np.clip(((pixels - bias) @ matrix.T) >> 8, 0, 255)  # [INFERENCE] saturate
        mean = np.array(self.mean, dtype=np.float32)
        out = (pixels.astype(np.float32) - mean) * np.array(self.var_reci, dtype=np.float32)
        if fp16:
            out = out.astype(np.float16).astype(np.float32)
        out = out[np.newaxis]
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2) if layout == "NCHW" else out)


def _yuv444(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H*3/2, W) NV12 bytes -> (H, W, 3) int64 (Y, first chroma, second chroma), chroma per 2x2."""
    width, height = size
    luma = frame[:height].astype(np.int64)
    chroma = frame[height:].reshape(height // 2, width // 2, 2).astype(np.int64)
    chroma = chroma.repeat(2, axis=0).repeat(2, axis=1)  # [INFERENCE] nearest upsampling
    return np.concatenate([luma[..., np.newaxis], chroma], axis=-1)


def _number(value: float) -> str:
    return repr(float(value))  # shortest text that reads back to the same double


def _int_tuple(value: Any, length: int, key: str) -> tuple[int, ...]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != length
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise _bad(f"'{key}' must be a list of {length} integers, got {value!r}")
    return tuple(value)


def _per_channel(value: Any, key: str) -> tuple[float, float, float]:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    values = [value] * 3 if is_number else value
    if (
        not isinstance(values, Sequence)
        or isinstance(values, str)
        or len(values) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    ):
        raise _bad(f"'{key}' must be one number or three, got {value!r}")
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def _validate(spec: AippSpec) -> None:
    if spec.input_format not in _FORMATS:
        raise _bad(f"unknown input_format '{spec.input_format}'", hint=f"one of {list(_FORMATS)}")
    if spec.model_color not in ("RGB", "BGR"):
        raise _bad(f"model_color must be RGB or BGR, not '{spec.model_color}'")
    if spec.csc not in CSC_PRESETS:
        raise _bad(f"unknown csc '{spec.csc}'", hint=f"one of {list(CSC_PRESETS)}")
    if spec.std is not None and spec.scale is not None:
        raise _bad("give 'std' or 'scale', not both")
    if spec.std is not None and any(s == 0 for s in spec.std):
        raise _bad("'std' must not contain 0")
    if any(abs(v) > 65504 for v in spec.var_reci):  # var_reci_chn range, aclpythondevg_01_0182
        raise _bad("1/std (or scale) is outside [-65504, 65504], AIPP's var_reci range")
    width, height = spec.source_size
    if not (1 <= width <= MAX_IMAGE_SIDE and 1 <= height <= MAX_IMAGE_SIDE):
        raise _bad(f"source_size {width}x{height} is outside 1..{MAX_IMAGE_SIDE}")
    even = [("source width", width), ("source height", height)]
    if spec.crop is not None:
        x, y, crop_w, crop_h = spec.crop
        if x < 0 or y < 0 or crop_w < 1 or crop_h < 1 or x + crop_w > width or y + crop_h > height:
            raise _bad(f"crop {list(spec.crop)} does not fit in the {width}x{height} source")
        even += [("crop x", x), ("crop y", y), ("crop width", crop_w), ("crop height", crop_h)]
    if spec.is_yuv:
        odd = [name for name, value in even if value % 2]
        if odd:
            raise _bad(
                f"YUV420SP needs even sizes and crop offsets; odd: {', '.join(odd)}",
                hint="chroma covers 2x2 pixels, so AIPP only starts and ends on even positions",
            )
