"""Event clips: the seconds around a line crossing or a zone entry, cut from encoded packets.

How (Frigate's recordings, without its always-on disk writes): every frame of the stream is
encoded once, in a thread of its own, into H.264 packets with a keyframe forced every
``keyframe_s`` of the stream's clock (``h264.py``); the packets of the last ``pre_s +
keyframe_s`` seconds stay in a ring (``ring.py``). An event asks for a clip (``request``); when
the encoder reaches the event's frame, a clip file is opened under a temporary name, the ring's
packets from the last keyframe at or before ``pre_s`` before the event are copied into it (no
decoding), and the packets that follow are appended until ``post_s`` after the event; then the
file is renamed into place and ``on_clip`` hears of it (the app publishes ``clip_ready``).

Clips of overlapping events are separate files, each complete. A stream that ends or stops
finishes its open clips with the post-roll it got. A clip that cannot be written (a full disk)
is removed, logged and counted (``failed``), and the stream goes on: a camera must not stop
because its event store did.

The stream's clock is the frames' media time (``frames.media_time``: a file's pts, a camera's
monotonic capture clock, which a wall-clock step does not move), so a file processed faster than
real time still gets clips of ``pre_s`` + ``post_s`` seconds of its own video.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._files import WriteFailedError
from edgefuse.vision.media.h264 import KEYFRAME_S, H264Encoder, Mp4File
from edgefuse.vision.media.ring import PacketRing
from edgefuse.vision.streams.frames import FrameResult, media_time
from edgefuse.vision.streams.recording import Recording
from edgefuse.vision.streams.sinks import Describe, Sink

log = logging.getLogger(__name__)

QUEUE_FRAMES = 8  # frames waiting for the encoder; a live source's sink never waits on it long
_END = None


@dataclasses.dataclass(frozen=True)
class ClipOptions:
    """Seconds of video before and after the event, and the forced keyframe interval (a clip
    starts up to that much earlier than ``pre_s``)."""

    pre_s: float = 3.0
    post_s: float = 5.0
    keyframe_s: float = KEYFRAME_S


@dataclasses.dataclass
class _Clip:
    event: dict[str, Any]
    path: Path
    index: int  # the event's frame
    at: float  # its clock
    file: Mp4File | None = None
    frames: int = 0


class ClipRecorder(Sink):
    """The clip-cutting sink of one stream (see the module docstring)."""

    needs_image = True  # clips show the annotated frames

    def __init__(self, options: ClipOptions, *,
                 on_clip: Callable[[dict[str, Any], Path], None] | None = None,
                 recording: Recording | None = None) -> None:
        self.options = options
        self.recording = recording  # a clip not written counts there (/metrics)
        self.ring = PacketRing(options.pre_s)
        self.on_clip = on_clip or (lambda event, path: None)
        self.written: list[Path] = []
        self.failed = 0
        self.fps: float | None = None
        self._encoder: H264Encoder | None = None
        self._requests: list[_Clip] = []
        self._open: list[_Clip] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_FRAMES)
        self._thread = threading.Thread(target=self._run, name="edgefuse-clips", daemon=True)
        self._thread.start()
        self._closed = False

    def request(self, event: dict[str, Any], path: Path, index: int, clock: float) -> None:
        """A clip at ``path`` around the frame ``index`` (its clock ``clock``); from any
        thread, before that frame reaches the sink."""
        with self._lock:
            self._requests.append(_Clip(event, path, index, clock))

    def start(self, *, fps: float | None, describe: Describe) -> None:
        self.fps = fps

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        if image is not None:
            self._queue.put((image, media_time(result.frame), result.frame.index))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_END)
        self._thread.join()

    # ---- the encoder thread -------------------------------------------------------------------

    def _run(self) -> None:
        while (item := self._queue.get()) is not _END:
            try:
                self._encode(*item)
            except Exception:  # noqa: BLE001 - the stream goes on; its clips say what failed
                log.exception("event clips: encoding a frame failed")
        for clip in list(self._open):
            self._finish(clip)
        with self._lock:
            missed, self._requests = self._requests, []
        if missed:
            log.warning("event clips: %d clip(s) requested for frames that never reached the "
                        "encoder; none written", len(missed))

    def _encode(self, image: np.ndarray, clock: float, index: int) -> None:
        if self._encoder is None:
            self._encoder = H264Encoder(image.shape[1], image.shape[0], fps=self.fps,
                                        keyframe_s=self.options.keyframe_s)
        for packet in self._encoder.encode(image, clock):
            self.ring.add(packet, clock, index)
            for clip in list(self._open):
                self._append(clip, [packet], clock)
        with self._lock:
            due = [clip for clip in self._requests if clip.index <= index]
            self._requests = [clip for clip in self._requests if clip.index > index]
        for clip in due:
            self._start(clip)

    def _start(self, clip: _Clip) -> None:
        try:
            clip.file = Mp4File(clip.path, self._encoder.width, self._encoder.height,
                                fps=self.fps)
        except Exception:  # noqa: BLE001 - counted and logged; the stream goes on
            self._failed(clip)
            return
        self._open.append(clip)
        held = self.ring.since(clip.at - self.options.pre_s)
        for item in held:
            if not self._append(clip, [item.packet], item.clock, copy=True):
                return

    def _append(self, clip: _Clip, packets: list[Any], clock: float, *,
                copy: bool = True) -> bool:
        """Adds ``packets`` to an open clip; finishes it past its post-roll. False once the
        clip is no longer open."""
        try:
            clip.file.write(packets, copy=copy)
        except Exception:  # noqa: BLE001 - counted and logged; the stream goes on
            self._open.remove(clip)
            clip.file.discard()
            self._failed(clip)
            return False
        clip.frames += len(packets)
        if clock >= clip.at + self.options.post_s:
            self._finish(clip)
            return False
        return True

    def _finish(self, clip: _Clip) -> None:
        self._open.remove(clip)
        try:
            clip.file.commit()
        except Exception:  # noqa: BLE001 - counted and logged; the stream goes on
            self._failed(clip)
            return
        self.written.append(clip.path)
        if self.recording is not None:
            self.recording.succeeded()
        log.info("event clip %s (%d frames)", clip.path, clip.frames)
        self.on_clip(clip.event, clip.path)

    def _failed(self, clip: _Clip) -> None:
        """In an ``except`` block: counts and logs the clip that failed, and tells the
        recording when it was the disk (the next clip written resumes it)."""
        self.failed += 1
        error = sys.exc_info()[1]
        if self.recording is not None and isinstance(error, (OSError, WriteFailedError)):
            self.recording.failed(error if isinstance(error, WriteFailedError)
                                  else WriteFailedError(clip.path, error))
        log.exception("event clip %s could not be written; nothing was kept", clip.path)
