"""Demuxing on the CPU for the media units: a video file or stream into whole coded frames.

Why here and in this shape: VDEC takes one whole frame per ``vdec_send_stream`` in frame mode
(aclpythondevg_01_0492, "VDEC功能及约束说明" aclpythondevg_01_0478) as an H.264/H.265 elementary
stream, i.e. Annex-B with start codes. MP4/MKV store H.264/H.265 length-prefixed (AVCC/HVCC) with
the parameter sets in the container's header, so each packet goes through FFmpeg's
``h264_mp4toannexb`` / ``hevc_mp4toannexb`` bitstream filter (which passes Annex-B packets, as an
RTSP camera sends them, through unchanged). JPEGD takes one whole JPEG per send: an MJPEG
stream's packets already are.

PyAV does only the container work here; no pixel is decoded on the CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgefuse.errors import InputError, MissingDependencyError, Ref

VDEC_CODECS = ("h264", "hevc")
JPEGD_CODECS = ("mjpeg",)
ANNEX_B_FILTERS = {"h264": "h264_mp4toannexb", "hevc": "hevc_mp4toannexb"}


@dataclasses.dataclass(frozen=True)
class Packet:
    """One whole coded frame and its time in seconds (None where the container has none)."""

    data: bytes
    seconds: float | None


def import_av() -> Any:
    try:
        import av  # noqa: PLC0415 (optional: the DVPP source's demuxer)
    except ImportError as exc:
        raise MissingDependencyError("decode: dvpp demuxes with PyAV",
                                     hint="pip install 'edgefuse[vision]' (PyAV)") from exc
    return av


class Demuxer:
    """The first video stream of ``location`` (a file or a stream URL), as whole frames."""

    def __init__(self, location: str | Path, *, timeout_s: float | None = None) -> None:
        av = import_av()
        self.location = str(location)
        options = ({"timeout": str(int(timeout_s * 1e6)), "rw_timeout": str(int(timeout_s * 1e6))}
                   if timeout_s and "://" in self.location else {})
        try:
            self._container = av.open(self.location, options=options)
        except (av.error.FFmpegError, OSError) as exc:
            raise InputError(f"cannot open '{location}' for DVPP decoding: {exc}",
                             reference=Ref.BAD_SOURCE) from exc
        try:
            if not self._container.streams.video:
                raise InputError(f"'{location}' has no video stream", reference=Ref.BAD_SOURCE)
            self._stream = self._container.streams.video[0]
            context = self._stream.codec_context
            self.codec: str = context.name
            if self.codec not in VDEC_CODECS + JPEGD_CODECS:
                raise InputError(f"'{location}' is {self.codec}; VDEC decodes H.264/H.265 and "
                                 "JPEGD JPEG",
                                 hint="re-encode it to H.264 (ffmpeg -i IN -c:v libx264 -pix_fmt "
                                      "yuv420p OUT.mp4), or decode on the CPU (--decode cpu; "
                                      "decode: cpu in an app config)",
                                 reference=Ref.BAD_SOURCE)
            self.size = (int(context.width), int(context.height))  # (width, height)
            self.full_range = self.codec in JPEGD_CODECS or int(context.color_range or 0) == 2
            rate = self._stream.average_rate
            self.fps = float(rate) if rate else None
            self._filter = (av.bitstream.BitStreamFilterContext(
                ANNEX_B_FILTERS[self.codec], self._stream)
                if self.codec in ANNEX_B_FILTERS else None)
        except BaseException:
            self._container.close()
            raise

    @property
    def unit(self) -> str:
        """The media unit that decodes this stream."""
        return "jpegd" if self.codec in JPEGD_CODECS else "vdec"

    def packets(self) -> Iterator[Packet]:
        """Every whole frame in order (Annex-B for VDEC); transport errors propagate."""
        for packet in self._container.demux(self._stream):
            if not packet.size:  # the demuxer's end marker: the filter is flushed below
                continue
            for out in self._filter.filter(packet) if self._filter else [packet]:
                if out.size:
                    seconds = float(out.pts * out.time_base) if out.pts is not None else None
                    yield Packet(bytes(out), seconds)
        if self._filter is not None:
            for out in self._filter.filter(None):
                if out.size:
                    yield Packet(bytes(out), None)

    def close(self) -> None:
        self._container.close()
