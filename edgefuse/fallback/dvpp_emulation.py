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
from edgefuse.acl.dvpp.demux import JPEGD_CODECS, Demuxer, import_av
from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Geometry

PTS_UNITS = 1_000_000  # a packet's time travels through the decoder in microseconds
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

    def to_bgr(self, full_range: bool = False) -> np.ndarray:
        """The frame for drawing and saving (what a sink fetches from the device), read as
        the range it was decoded in (``full_range``: a JPEG's)."""
        luma, chroma = self.planes()
        return bgr_from_planes(luma, chroma, full_range)


def bgr_from_planes(luma: np.ndarray, chroma: np.ndarray, full_range: bool) -> np.ndarray:
    """BGR from YUV420SP planes. OpenCV's NV12 conversion is BT.601 limited range (a camera's
    H.264); a JPEG's YUV is full range (JFIF), which OpenCV's YCrCb conversion reads."""
    if not full_range:
        packed = np.concatenate([luma, chroma.reshape(luma.shape[0] // 2, -1)])
        return cv2().cvtColor(np.ascontiguousarray(packed), cv2().COLOR_YUV2BGR_NV12)
    height, width = luma.shape
    up = cv2().resize(np.ascontiguousarray(chroma), (width, height),
                      interpolation=cv2().INTER_LINEAR)
    ycrcb = np.dstack([luma, up[..., 1], up[..., 0]])
    return cv2().cvtColor(ycrcb, cv2().COLOR_YCrCb2BGR)


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
                             hint="compile with `--aipp SPEC.yaml` whose input_format is YUV420SP "
                                  "(docs/sim.md), or decode on the CPU: --decode cpu",
                             reference=Ref.DVPP_GEOMETRY)
        self.spec, self.soc = spec, soc
        self.pad_value, self.center, self.rounding = pad_value, center, rounding
        width, height = spec.source_size
        self.size = (height, width)
        # the pad colour as the build's CSC reads it: [1.5H, W] bytes, the last row chroma
        gray = spec.frame_from_bgr(np.full((2, 2, 3), pad_value, np.uint8))
        self._pad_luma, self._pad_chroma = gray[0, 0], gray[-1, :2]  # as the board memsets them
        self.copies = 0  # host<->device copies VPC needed (none: it reads and writes device memory)

    def letterbox(self, source: DevicePicture, out: np.ndarray | None = None
                  ) -> tuple[np.ndarray, Geometry]:
        """The model input [1.5H, W] (uint8 NV12/NV21 as the build reads it) and its geometry;
        written into ``out`` (a [1.5H, W] uint8 array: the session's input buffer, as VPC's
        output picture is on the board) when given, else into a new array."""
        pic = source.picture
        plan = dvpp.letterbox((pic.height, pic.width), self.size, self.soc,
                              pad_value=self.pad_value, center=self.center,
                              rounding=self.rounding)
        shape = (plan.output.size // plan.output.width, plan.output.width)
        if out is None:
            out = np.empty(shape, np.uint8)
        elif out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous uint8 {list(shape)} array, not "
                             f"{out.dtype} {list(out.shape)}")
        target = out
        out = DevicePicture(out.reshape(-1), plan.output)
        luma_out, chroma_out = out.planes()
        luma_out[:] = self._pad_luma
        chroma_out[:] = self._pad_chroma
        luma, chroma = source.planes()
        if self.spec.input_format == "YVU420SP":  # VPC writes NV21 where the build reads it
            chroma = chroma[..., ::-1]
        paste_resized((luma, chroma), (luma_out, chroma_out), plan.content, plan.offset)
        return target, plan.geometry


def paste_resized(source: tuple[np.ndarray, np.ndarray], out: tuple[np.ndarray, np.ndarray],
                  content: tuple[int, int], offset: tuple[int, int]) -> None:
    """VPC's resize-paste of YUV420SP planes (luma [h, w], chroma [h/2, w/2, 2]): the luma to
    ``content`` (width, height) at ``offset`` (left, top), the chroma at half of both,
    bilinear (VPC's default interpolation)."""
    (luma, chroma), (luma_out, chroma_out) = source, out
    (new_w, new_h), (left, top) = content, offset
    resize = cv2().resize
    luma_out[top:top + new_h, left:left + new_w] = resize(
        np.ascontiguousarray(luma), (new_w, new_h), interpolation=cv2().INTER_LINEAR)
    chroma_out[top // 2:(top + new_h) // 2, left // 2:(left + new_w) // 2] = resize(
        np.ascontiguousarray(chroma), (new_w // 2, new_h // 2), interpolation=cv2().INTER_LINEAR)


class EmulatedDecoder:
    """VDEC (H.264/H.265) or JPEGD (JPEG) of one stream, emulated with PyAV's decoder: whole
    coded frames in (as ``demux.Demuxer`` gives them), the unit's YUV420SP pictures out in
    display order, each with its time in seconds. JPEGD's 4:2:2/4:4:4 to YUV420SP is
    libswscale's here."""

    def __init__(self, codec: str, soc: str) -> None:
        av = import_av()
        self._av, self.soc = av, soc
        self.unit = "jpegd_out" if codec in JPEGD_CODECS else "vdec_out"
        self._context = av.CodecContext.create(codec, "r")
        self.failed = 0  # packets the decoder refused (VDEC's frame_flag != 0)

    def decode(self, data: bytes, seconds: float | None = None
               ) -> list[tuple[DevicePicture, float | None]]:
        packet = self._av.Packet(data)
        if seconds is not None:
            packet.pts = round(seconds * PTS_UNITS)
        try:
            return self._pictures(self._context.decode(packet))
        except self._av.error.InvalidDataError:
            self.failed += 1
            return []

    def flush(self) -> list[tuple[DevicePicture, float | None]]:
        """The pictures the decoder still holds at the end of the stream."""
        return self._pictures(self._context.decode(None))

    def _pictures(self, frames: list[Any]) -> list[tuple[DevicePicture, float | None]]:
        return [(lay_out(frame.to_ndarray(format="nv12"), frame.width, frame.height, self.soc,
                         self.unit), None if frame.pts is None else frame.pts / PTS_UNITS)
                for frame in frames]


def decoded_pictures(path: str | Path, soc: str) -> Iterator[tuple[DevicePicture, float | None]]:
    """VDEC's (or JPEGD's) output pictures of a video file or stream, with each one's time in
    seconds; demuxed by PyAV on the host, as the board demuxes on its CPU."""
    demuxer = Demuxer(path)
    try:
        decoder = EmulatedDecoder(demuxer.codec, soc)
        for packet in demuxer.packets():
            yield from decoder.decode(packet.data, packet.seconds)
        yield from decoder.flush()
    finally:
        demuxer.close()


def check_colour_range(spec: AippSpec, path: str | Path, full: bool) -> None:
    """The build's CSC must read the stream's range (``full``: JPEG, or a stream flagged full
    range), or every colour shifts."""
    if full != (spec.csc in FULL_RANGE_CSC):
        wanted = "jpeg" if full else "bt601_narrow (or bt709_narrow)"
        raise InputError(
            f"'{path}' is {'full' if full else 'limited'}-range YUV but the build's AIPP CSC is "
            f"'{spec.csc}'",
            hint=f"compile with `--aipp` csc: {wanted}, or decode on the CPU: --decode cpu",
            reference=Ref.DVPP_GEOMETRY)


def nv12_from_bgr(image: np.ndarray) -> tuple[np.ndarray, int, int]:
    """A JPEG decoded on the CPU back in JPEG's own YUV (full-range BT.601, JFIF: OpenCV's
    YCrCb; its NV12 conversion would be limited range), as packed NV12 [1.5h, w] cropped to
    even sizes (YUV420SP's), chroma averaged over 2x2; with its width and height."""
    height, width = image.shape[0] - image.shape[0] % 2, image.shape[1] - image.shape[1] % 2
    ycrcb = cv2().cvtColor(np.ascontiguousarray(image[:height, :width]),
                           cv2().COLOR_BGR2YCrCb)
    chroma = cv2().resize(ycrcb[..., 1:], (width // 2, height // 2),
                          interpolation=cv2().INTER_AREA)[..., ::-1]  # Cb, Cr: NV12's U, V
    return np.concatenate([ycrcb[..., 0], chroma.reshape(height // 2, width)]), width, height


def cpu_jpeg(data: bytes) -> np.ndarray | None:
    """A JPEG decoded on the CPU (OpenCV), None when it does not decode."""
    return cv2().imdecode(np.frombuffer(data, np.uint8), cv2().IMREAD_COLOR)


class EmulatedUnits:
    """The ``sim`` backend's media units behind a DVPP source: ``EmulatedDecoder`` and
    ``EmulatedVpc`` (the same calls as ``edgefuse.acl.dvpp.units.BoardUnits``)."""

    def __init__(self, spec: AippSpec, soc: str, *, pad_value: int = 114, center: bool = True,
                 rounding: str = "round") -> None:
        self.soc = soc
        self._vpc = EmulatedVpc(spec, soc, pad_value=pad_value, center=center,
                                rounding=rounding)
        self._decoder: EmulatedDecoder | None = None
        self._full_range = False
        self._take: Any = None
        self._input_name = ""
        self.in_place = 0  # frames written into a set of the session's input buffers

    def feed_into(self, take: Any, input_name: str) -> None:
        """Letterbox into sets of the session's input buffers, as the board's VPC does:
        ``take()`` gives a free set or None while every set is in use (then a new array)."""
        self._take, self._input_name = take, input_name

    def start(self, codec: str, size: tuple[int, int], full_range: bool) -> None:
        self._decoder = EmulatedDecoder(codec, self.soc)
        self._full_range = full_range

    @property
    def failed(self) -> int:
        return self._decoder.failed if self._decoder is not None else 0

    def stop(self) -> None:
        self._decoder = None

    def decode(self, data: bytes, seconds: float | None) -> list[tuple[DevicePicture, Any]]:
        if self._decoder is None:
            raise RuntimeError("decode before start")
        return self._decoder.decode(data, seconds)

    def finish(self) -> list[tuple[DevicePicture, Any]]:
        return self._decoder.flush() if self._decoder is not None else []

    def from_cpu(self, image: np.ndarray, seconds: float | None
                 ) -> tuple[DevicePicture, float | None]:
        """A frame the CPU decoded, as VPC's input picture."""
        nv12, width, height = nv12_from_bgr(image)
        return lay_out(nv12, width, height, self.soc, "vpc_in"), seconds

    def letterbox(self, picture: DevicePicture) -> tuple[Any, Geometry]:
        """The model input: written into a free set of the session's input buffers (returned:
        the run reads it in place) or, without one, into an array of its own."""
        buffers = self._take() if self._take is not None else None
        if buffers is None:
            return self._vpc.letterbox(picture)
        _, geometry = self._vpc.letterbox(picture, out=buffers[self._input_name][0])
        self.in_place += 1
        return buffers, geometry

    def size(self, picture: DevicePicture) -> tuple[int, int]:
        return picture.picture.width, picture.picture.height

    def bgr(self, picture: DevicePicture) -> np.ndarray:
        return picture.to_bgr(self._full_range)

    def release(self, picture: DevicePicture) -> None:
        """Nothing to give back on the host (the board returns the buffer to its pool)."""

    def close(self) -> None:
        self._decoder = None
