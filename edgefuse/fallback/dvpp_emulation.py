"""The ``sim`` backend's DVPP: VDEC/JPEGD and VPC emulated on the host into the board's buffers.

Why emulate the buffers and not just the pixels: what breaks a DVPP path on the board is the
layout (a stride the AIPP build does not read, an odd paste offset, chroma planes read without
their stride, a letterbox that differs from the CPU's by a pixel). Here PyAV decodes the stream
as VDEC would (its own YUV420, no colour conversion) into a YUV420SP picture laid out with the
SoC's documented stride (``edgefuse.acl.dvpp.geometry``; the padding filled with a value no
reader should ever see), and VPC's crop-resize-paste is replayed plane by plane (luma, then the
interleaved chroma at half size, bilinear as VPC's default) into the model's YUV420SP input,
pre-filled with the letterbox's pad colour in the build's colour space. The AIPP YUV420SP build
then runs on that buffer exactly as the board's would, so its detections can be compared with
the CPU path's.

Refused as the board refuses them: codecs VDEC does not decode (H.264 and H.265 only, "VDEC 功能
及约束说明", aclpythondevg_01_0478; JPEG goes to JPEGD), and a stream whose colour range is not
the one the build's AIPP CSC assumes (a limited-range stream through ``csc: jpeg`` shifts every
colour: compile with ``csc: bt601_narrow``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.dvpp import geometry as dvpp
from edgefuse.errors import InputError, MissingDependencyError, Ref
from edgefuse.preprocess import Geometry

VDEC_CODECS = ("h264", "hevc")
JPEGD_CODECS = ("mjpeg",)
PADDING_BYTE = 0xA5  # what stride padding holds: a reader that ignores the stride sees stripes
# The AIPP CSC presets by the range of YUV they read (edgefuse.acl.compile.aipp.CSC_PRESETS).
FULL_RANGE_CSC = ("jpeg",)


@dataclasses.dataclass(frozen=True)
class DevicePicture:
    """A YUV420SP picture as the media unit leaves it: the buffer and its layout."""

    buffer: np.ndarray  # uint8, picture.size bytes
    picture: dvpp.Picture

    def planes(self) -> tuple[np.ndarray, np.ndarray]:
        """(luma [h, w], chroma [h/2, w/2, 2]) views through the strides."""
        pic = self.picture
        luma_bytes = pic.stride_w * pic.stride_h
        luma = self.buffer[:luma_bytes].reshape(pic.stride_h, pic.stride_w)[:pic.height, :pic.width]
        chroma = self.buffer[luma_bytes:].reshape(pic.stride_h // 2, pic.stride_w)
        chroma = chroma[:pic.height // 2, :pic.width].reshape(pic.height // 2, pic.width // 2, 2)
        return luma, chroma

    def to_bgr(self) -> np.ndarray:
        """The frame for drawing and saving (what a sink fetches from the device)."""
        luma, chroma = self.planes()
        packed = np.concatenate([luma, chroma.reshape(luma.shape[0] // 2, -1)])
        return cv2().cvtColor(np.ascontiguousarray(packed), cv2().COLOR_YUV2BGR_NV12)


def lay_out(nv12: np.ndarray, width: int, height: int, soc: str, unit: str) -> DevicePicture:
    """Packed NV12 bytes [1.5h, w] -> the buffer ``unit`` writes on ``soc``, stride padding
    included (and filled with PADDING_BYTE)."""
    pic = dvpp.picture(width, height, soc, unit)
    dvpp.check_picture(pic, soc, unit)
    buffer = np.full(pic.size, PADDING_BYTE, np.uint8)
    luma_bytes = pic.stride_w * pic.stride_h
    buffer[:luma_bytes].reshape(pic.stride_h, pic.stride_w)[:height, :width] = nv12[:height]
    chroma = buffer[luma_bytes:].reshape(pic.stride_h // 2, pic.stride_w)
    chroma[:height // 2, :width] = nv12[height:height + height // 2]
    return DevicePicture(buffer, pic)


class EmulatedVpc:
    """VPC's letterbox (crop-resize-paste) into an AIPP YUV420SP build's input, on the host."""

    def __init__(self, spec: AippSpec, soc: str, *, pad_value: int = 114, center: bool = True,
                 rounding: str = "round") -> None:
        if not spec.is_yuv:
            raise InputError(f"DVPP hands YUV420SP to the model; this build's AIPP takes "
                             f"{spec.input_format}",
                             hint="compile with `--aipp` input_format: YUV420SP",
                             reference=Ref.DVPP_GEOMETRY)
        self.spec, self.soc = spec, soc
        self.pad_value, self.center, self.rounding = pad_value, center, rounding
        width, height = spec.source_size
        self.size = (height, width)
        # the pad colour as the build's CSC reads it: [1.5H, W] bytes, the last row chroma
        gray = spec.frame_from_bgr(np.full((2, 2, 3), pad_value, np.uint8))
        self._pad_luma, self._pad_chroma = gray[0, 0], gray[-1, :2]  # as the board memsets them
        self.copies = 0  # host<->device copies VPC needed (none: it reads and writes device memory)

    def letterbox(self, source: DevicePicture) -> tuple[np.ndarray, Geometry]:
        """The model input [1.5H, W] (uint8 NV12/NV21 as the build reads it) and its geometry."""
        pic = source.picture
        plan = dvpp.letterbox((pic.height, pic.width), self.size, self.soc,
                              pad_value=self.pad_value, center=self.center,
                              rounding=self.rounding)
        out = DevicePicture(np.empty(plan.output.size, np.uint8), plan.output)
        luma_out, chroma_out = out.planes()
        luma_out[:] = self._pad_luma
        chroma_out[:] = self._pad_chroma
        luma, chroma = source.planes()
        if self.spec.input_format == "YVU420SP":  # VPC writes NV21 where the build reads it
            chroma = chroma[..., ::-1]
        (new_w, new_h), (left, top) = plan.content, plan.offset
        resize = cv2().resize
        luma_out[top:top + new_h, left:left + new_w] = resize(
            np.ascontiguousarray(luma), (new_w, new_h), interpolation=cv2().INTER_LINEAR)
        chroma_out[top // 2:(top + new_h) // 2, left // 2:(left + new_w) // 2] = resize(
            np.ascontiguousarray(chroma), (new_w // 2, new_h // 2),
            interpolation=cv2().INTER_LINEAR)
        return out.buffer.reshape(-1, plan.output.width), plan.geometry


def decoded_pictures(path: str | Path, soc: str) -> Iterator[tuple[DevicePicture, float | None]]:
    """VDEC's (or JPEGD's) output pictures of a video file or stream, with each one's time in
    seconds; demuxed and decoded by PyAV on the host, as the board demuxes on its CPU."""
    try:
        import av  # noqa: PLC0415 (optional: the DVPP source's demuxer)
    except ImportError as exc:
        raise MissingDependencyError("decode: dvpp demuxes with PyAV",
                                     hint="pip install 'edgefuse[vision]' (PyAV)") from exc
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as exc:
        raise InputError(f"cannot open '{path}' for DVPP decoding: {exc}",
                         reference=Ref.BAD_SOURCE) from exc
    with container:
        if not container.streams.video:
            raise InputError(f"'{path}' has no video stream", reference=Ref.BAD_SOURCE)
        stream = container.streams.video[0]
        codec = stream.codec_context.name
        if codec not in VDEC_CODECS + JPEGD_CODECS:
            raise InputError(f"'{path}' is {codec}; VDEC decodes H.264/H.265 and JPEGD JPEG",
                             hint="re-encode to H.264, or use decode: cpu",
                             reference=Ref.BAD_SOURCE)
        unit = "jpegd_out" if codec in JPEGD_CODECS else "vdec_out"
        for frame in container.decode(stream):
            nv12 = frame.to_ndarray(format="nv12")
            seconds = float(frame.time) if frame.time is not None else None
            yield lay_out(nv12, frame.width, frame.height, soc, unit), seconds


def stream_is_full_range(path: str | Path) -> bool:
    """Whether the stream's YUV spans 0..255 (JPEG, or flagged full range)."""
    import av  # noqa: PLC0415 (optional: the DVPP source's demuxer)

    with av.open(str(path)) as container:
        context: Any = container.streams.video[0].codec_context
        return context.name in JPEGD_CODECS or int(context.color_range or 0) == 2


def check_colour_range(spec: AippSpec, path: str | Path) -> None:
    """The build's CSC must read the stream's range, or every colour shifts."""
    full = stream_is_full_range(path)
    if full != (spec.csc in FULL_RANGE_CSC):
        wanted = "jpeg" if full else "bt601_narrow (or bt709_narrow)"
        raise InputError(
            f"'{path}' is {'full' if full else 'limited'}-range YUV but the build's AIPP CSC is "
            f"'{spec.csc}'", hint=f"compile with `--aipp` csc: {wanted}",
            reference=Ref.DVPP_GEOMETRY)
