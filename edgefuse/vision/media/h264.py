"""H.264 in MP4 through PyAV: video that every browser plays.

Why PyAV and not OpenCV's ``VideoWriter``: OpenCV's pip wheels carry an FFmpeg without libx264,
so the best they write into an MP4 is MPEG-4 Part 2 (``mp4v``), which Chromium and Firefox refuse
to play (``readyState`` stays 0). PyAV's wheels carry libx264 on x86_64 and aarch64. The output is
what browsers require (the Media Source / HTML video rules of Chromium, Firefox and Safari):
H.264 (``avc1``) in yuv420p, with the index (``moov``) at the front (``+faststart``) so playback
starts before the whole file has arrived.

Why the encoder is apart from the file (packets, not frames, cross between them): the same
encoded packets go into a file (``Mp4File``) or into a ring buffer of the last seconds from which
an event clip is cut without decoding anything (``clips.py``). Both need:

- one packet out per frame in, ``dts == pts``: ``tune=zerolatency`` (no B-frames, no lookahead),
  so a frame's packet exists as soon as the frame was encoded and any keyframe can start a file;
- a keyframe at a known interval of the frames' own clock (``keyframe_s``, forced as an IDR), so
  a clip can start at most that long before its pre-roll and a browser's seek lands near it;
- timestamps from the frames' clock in milliseconds (a live camera's frame rate wanders; a fixed
  rate would stretch or squeeze the video), strictly increasing.

``preset=ultrafast``: the encoder shares the CPU with decoding, drawing and (off the board) the
model, so CPU time per frame is what counts: on a drawn noisy 720p clip it took 7.8 ms of CPU per
frame against veryfast's 19.8 ms, for files about 30 % larger (110 against 85 kB a frame);
bench/video_writer.py measures what it costs the apps.
"""

from __future__ import annotations

import fractions
import functools
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse._deps import require
from edgefuse.errors import MissingDependencyError
from edgefuse.vision.streams.staging import Staged

log = logging.getLogger(__name__)

TIME_BASE = fractions.Fraction(1, 1000)  # packet timestamps in milliseconds
KEYFRAME_S = 1.0
PRESET = "ultrafast"
CONTAINERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska"}
_FASTSTART = {"mp4", "mov"}


def pyav() -> Any:
    """The ``av`` module (PyAV), or the error naming the extra that installs it."""
    return require("av", extra="vision", purpose="H.264 video (browser-playable MP4)")


@functools.lru_cache(maxsize=1)
def h264_available() -> bool:
    """Whether PyAV is installed with an H.264 encoder (libx264)."""
    try:
        av = pyav()
    except MissingDependencyError:
        return False
    return "libx264" in av.codecs_available


def even_size(width: int, height: int) -> tuple[int, int]:
    """yuv420p needs even sides: an odd frame loses its last column or row."""
    return width - width % 2, height - height % 2


class H264Encoder:
    """BGR uint8 frames in, H.264 packets out (see the module docstring); the first frame's size
    is the video's (an odd side loses a pixel; PyAV's encoder scales a later frame of another size
to it, as after a camera came back at another resolution)."""

    def __init__(self, width: int, height: int, *, fps: float | None = None,
                 keyframe_s: float = KEYFRAME_S, preset: str = PRESET) -> None:
        av = pyav()
        self.width, self.height = even_size(width, height)
        if self.width < 2 or self.height < 2:
            raise ValueError(f"cannot encode {width}x{height} frames")
        self.fps = fps or 30.0
        self.keyframe_s = keyframe_s
        self._context = av.CodecContext.create("libx264", "w")
        self._context.width, self._context.height = self.width, self.height
        self._context.pix_fmt = "yuv420p"
        self._context.time_base = TIME_BASE
        self._context.framerate = fractions.Fraction(self.fps).limit_denominator(1001)
        self._context.gop_size = max(int(self.fps * keyframe_s * 10), 1)  # forced ones come first
        self._context.options = {"preset": preset, "tune": "zerolatency", "forced-idr": "1"}
        self._context.open()
        self._intra = av.video.frame.PictureType.I
        self._video_frame = av.VideoFrame
        self._origin: float | None = None
        self._last_pts = -1
        self._last_key: float | None = None

    def encode(self, image: np.ndarray, clock: float) -> list[Any]:
        """``image`` captured at ``clock`` (seconds, any origin; increasing) as packets (one,
        with zerolatency), each with ``pts`` in ``TIME_BASE`` from the first frame's clock."""
        if self._origin is None:
            self._origin = clock
        pts = max(round((clock - self._origin) / TIME_BASE), self._last_pts + 1)
        self._last_pts = pts
        image = image[:self.height, :self.width]
        yuv = cv2().cvtColor(np.ascontiguousarray(image), cv2().COLOR_BGR2YUV_I420)
        frame = self._video_frame.from_ndarray(yuv, format="yuv420p")
        frame.pts = pts
        if self._last_key is None or clock - self._last_key >= self.keyframe_s:
            frame.pict_type = self._intra
            self._last_key = clock
        return list(self._context.encode(frame))

    def flush(self) -> list[Any]:
        """The packets still inside the encoder (none with zerolatency, but never lost)."""
        return list(self._context.encode(None))


class Mp4File:
    """H.264 packets into a video file (``CONTAINERS`` by suffix) staged under a temporary name:
    ``commit`` renames it into place, ``discard`` removes it. Timestamps start at 0 from the
    first packet's, which must be a keyframe."""

    def __init__(self, path: str | os.PathLike[str], width: int, height: int, *,
                 fps: float | None = None) -> None:
        av = pyav()
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        self._file = Staged(self.path, suffix)
        try:
            form = CONTAINERS[suffix]
            options = {"movflags": "+faststart"} if form in _FASTSTART else {}
            self._container = av.open(str(self._file.tmp), "w", format=form, options=options)
            rate = fractions.Fraction(fps or 30.0).limit_denominator(1001)
            self._stream = self._container.add_mux_stream("h264", rate=rate, width=width,
                                                          height=height, time_base=TIME_BASE)
        except BaseException:
            self._file.discard()
            raise
        self._packet = av.Packet
        self._origin: int | None = None
        self._finished = False
        self.packets = 0

    def write(self, packets: Iterable[Any], *, copy: bool = False) -> None:
        """Mux ``packets`` (``copy``: leave the given ones untouched, for packets that a ring
        buffer still holds)."""
        for packet in packets:
            if self._origin is None:
                if not packet.is_keyframe:
                    raise ValueError("a video file must start on a keyframe")
                self._origin = packet.pts
            if copy:
                packet = self._copy(packet)
            packet.pts -= self._origin
            packet.dts = packet.pts
            packet.stream = self._stream
            self._container.mux(packet)
            self.packets += 1

    def _copy(self, packet: Any) -> Any:
        twin = self._packet(bytes(packet))
        twin.pts, twin.dts, twin.time_base = packet.pts, packet.dts, packet.time_base
        twin.is_keyframe = packet.is_keyframe
        return twin

    def finish(self) -> None:
        """Write the index (moved to the front: the file is rewritten once) and close the
        container, without renaming; a failure removes the file and raises."""
        if self._finished:
            return
        self._finished = True
        try:
            self._container.close()
        except BaseException:
            self._file.discard()
            raise

    def commit(self) -> None:
        """``finish``, then rename the file into place (``Staged.commit`` checks it)."""
        self.finish()
        self._file.commit()

    def discard(self) -> None:
        self._finished = True
        try:
            self._container.close()
        except Exception:  # noqa: BLE001 - the file is removed whatever its container says
            log.debug("closing the discarded %s failed", self._file.tmp, exc_info=True)
        self._file.discard()
