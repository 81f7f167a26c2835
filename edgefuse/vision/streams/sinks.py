"""Where results go: annotated video, JSON Lines, annotated images, a window, a Python callback.

Why files appear only when complete: for a file source, a video or JSON Lines file is written
under a temporary name next to its target and renamed into place when the sink closes (the
pipeline ends every sink on every way out: end of stream, Ctrl-C, SIGTERM; a failing stage
discards instead, see below), so a reader never sees a file that is still growing or was cut by
a crash. Images are written one by one the same way. A live source never ends, so there the
JSON Lines are appended record by record (``append=True``, with rotation) and the video is cut
into finished segments (``segment_s``): see ``live_files.py``. Temporaries an earlier, crashed
run left behind are recovered or removed when a sink opens (``staging.py``).

The JSON Lines record, one per frame (``FRAME_SCHEMA`` names the keys every record has; the
JSON Schema of every key, ``RECORD_SCHEMA``, ships as ``frame_record.schema.json`` and
docs/apps.md explains it)::

    {"frame": 12, "time": 1718000000.123, "mono": 5321.004917, "pts": 0.4,
     "size": {"width": 640, "height": 480},
     "detections": [{"class": "circle", "class_id": 0, "score": 0.912,
                     "box": [x1, y1, x2, y2]}],           # detection: frame pixels, x first
     "pixels": {"background": 250000, "person": 57200},   # segmentation: pixels per class
     "timings_ms": {"capture": 1.2, "preprocess": 0.8, "infer": 6.1, "postprocess": 0.4},
     "latency_ms": 9.3}

``time`` is the capture's wall clock (seconds since the epoch; it jumps when the board's clock is
stepped, e.g. from 1970 when NTP first answers), ``mono`` the capture's monotonic clock (seconds
since boot on Linux, the clock of journald's monotonic timestamps; it never jumps: subtract two
records' ``mono`` for the time between them), ``pts`` the frame's media time:
a video file's (frame index / its frame rate) and a generated camera's (an ``IterableSource``
given its ``fps``); null for live sources and images, which have none. ``size`` is the frame's
(boxes are in its pixels). ``latency_ms`` is capture to record.

A sink that cannot take more frames (the window was closed, the callback returned False) raises
``SinkClosed``; the pipeline then stops reading and shuts down cleanly.

Why every write is checked: a full card must never end in ``wrote out.mp4`` and a file with no
playable frame. Each write, ``fsync``, rename and the final size (``Staged.commit``) is checked,
and a failure is a ``WriteFailedError`` naming the file (``error[disk-full]``, or
``error[write-failed]`` with the errno). A file source's run then fails (exit 2) and the
pipeline discards every staged output: nothing that looks finished is left, and ``finish``
(the flush before any rename) makes a failure at the very end discard them all too. A live
source's sinks take a ``Recording`` instead (``recording.py``): their recording stops and
resumes, the stream goes on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse._files import WriteFailedError, cannot_write, check_folder_writable
from edgefuse.errors import InputError, Ref
from edgefuse.vision.media.retention import Retention
from edgefuse.vision.media.video_file import DEFAULT_FPS, VideoFile, check_video_suffix
from edgefuse.vision.streams.frames import FrameResult, media_time
from edgefuse.vision.streams.live_files import AppendedLines, Rotation, VideoSegments
from edgefuse.vision.streams.recording import Recording
from edgefuse.vision.streams.staging import Staged, recover_jsonl_leftovers, remove_leftovers

log = logging.getLogger(__name__)

FRAME_SCHEMA = ("frame", "time", "mono", "pts", "size", "timings_ms", "latency_ms")
RECORD_SCHEMA = Path(__file__).with_name("frame_record.schema.json")
Describe = Callable[[Any], dict[str, Any]]


class SinkClosed(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a sink that takes no more frames; the pipeline stops cleanly."""


class Sink:
    """Base: ``start`` once before the first frame, ``write`` per frame, ``close`` once."""

    needs_image = False  # whether write() wants the annotated frame
    recording: Recording | None = None  # a live source's file sink: failed writes suspend it

    def start(self, *, fps: float | None, describe: Describe) -> None:
        """The source's frame rate (None: unknown) and the task's result -> JSON fields."""

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Flush what is held to the (temporary) output and check it, before any sink of the
        run renames: a failure here makes the run discard every output, not keep some."""

    def close(self) -> None:
        """Finish the output; called once, whatever happened."""

    def discard(self) -> None:
        """End instead of ``close`` when the run failed before any frame reached the sink: a run
        that could not start leaves no output, not even an empty one (sinks that stage a file
        remove it; the others have written nothing and just close)."""
        self.close()


def frame_record(result: FrameResult, describe: Describe) -> dict[str, Any]:
    """The JSON Lines record of one frame (see the module docstring)."""
    frame = result.frame
    record: dict[str, Any] = {
        "frame": frame.index,
        "time": round(frame.time, 6),
        "mono": round(frame.clock, 6),
        "pts": None if frame.pts is None else round(frame.pts, 6),
        "size": {"width": frame.size[0], "height": frame.size[1]},
    }
    if frame.name is not None:
        record["name"] = frame.name
    record.update(describe(result.result))
    record["timings_ms"] = {k: round(v, 3) for k, v in result.timings_ms.items()}
    record["latency_ms"] = round((time.perf_counter() - frame.clock) * 1e3, 3)
    return record


class JsonlSink(Sink):
    """One JSON record per frame (the module docstring's schema): staged and renamed at the end,
    or with ``append=True`` (live sources) appended and flushed per record, rotated by
    ``rotate``. With ``stream``, every record names it (``"stream": NAME``). ``note`` adds a
    record that is no frame (a stream event), from any thread."""

    def __init__(self, path: str | os.PathLike[str], *, append: bool = False,
                 rotate: Rotation | None = None, stream: str | None = None,
                 recording: Recording | None = None, retain: Retention | None = None) -> None:
        path = Path(path)
        self.recording = recording
        recover_jsonl_leftovers(path)
        self._file: Staged | None = None
        if append:
            self._lines = AppendedLines(path, rotate, retain=retain)
        else:
            self._file = Staged(path, ".tmp")
            self._lines = AppendedLines(self._file.tmp, target=path)
        self._describe: Describe = lambda _: {}
        self._stream = stream
        self._lock = threading.Lock()  # frames from the sink thread, notes from a source's
        self._closed = False

    def start(self, *, fps: float | None, describe: Describe) -> None:
        self._describe = describe

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        record = frame_record(result, self._describe)
        if self._stream is not None:
            record = {"stream": self._stream, **record}
        self._append(record)

    def note(self, record: dict[str, Any]) -> None:
        """``record`` as a line of its own; ignored once the sink is closed."""
        self._append(record)

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record) + "\n"
        with self._lock:
            if self._closed:
                return
            if self.recording is None:
                self._lines.write(line)
            else:
                self.recording.guard(lambda: self._lines.write(line))

    def finish(self) -> None:
        with self._lock:
            self._lines.close()

    def close(self) -> None:
        self._end(keep=True)

    def discard(self) -> None:
        self._end(keep=False)

    def _end(self, *, keep: bool) -> None:
        """Close once: a staged file is renamed into place (``keep``) or removed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._lines.close()
        except WriteFailedError:
            if self._file is not None:
                self._file.discard()
            if self.recording is None:
                raise
            return
        if self._file is not None and keep:
            self._file.commit(size=self._lines.size)
        elif self._file is not None:
            self._file.discard()


class VideoSink(Sink):
    """The annotated frames as a video (``VideoFile``: H.264 in MP4 with PyAV, timed by the
    source's timestamps where it has them, else at its frame rate); with
    ``segment_s`` (live sources), as finished segments of that many seconds (``VideoSegments``),
    the oldest beyond ``keep`` deleted."""

    needs_image = True

    def __init__(self, path: str | os.PathLike[str], *, fps: float | None = None,
                 segment_s: float | None = None, keep: int | None = None,
                 recording: Recording | None = None, retain: Retention | None = None) -> None:
        path = Path(path)
        self.recording = recording
        self._video: VideoFile | None = None
        self._segments: VideoSegments | None = None
        if segment_s is None:
            remove_leftovers(path.parent, re.escape(path.name), path.suffix.lower(), "video")
            self._video = VideoFile(path, fps=fps)
        else:
            check_video_suffix(path)
            self._segments = VideoSegments(path, lambda name, rate: VideoFile(name, fps=rate),
                                           segment_s=segment_s, keep=keep, fps=fps,
                                           retain=retain)

    def start(self, *, fps: float | None, describe: Describe) -> None:
        target = self._video or self._segments
        target.fps = target.fps or fps or DEFAULT_FPS

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        if image is None:
            return
        if self._segments is not None:
            def write() -> None:
                self._segments.write(image, result.frame.time, media_time(result.frame),
                                     mono=result.frame.clock)
        else:  # a whole file: its source's own timestamps, else the source's frame rate
            def write() -> None:
                self._video.write(image, result.frame.pts)
        if self.recording is None:
            write()
        else:
            self.recording.guard(write)

    @property
    def segments(self) -> list[Path]:
        """The finished segments, oldest first (empty without ``segment_s``)."""
        return [] if self._segments is None else list(self._segments.finished)

    def finish(self) -> None:
        if self._video is not None:
            self._video.finish()

    def close(self) -> None:
        if self.recording is None:
            (self._video or self._segments).close()
        else:
            self.recording.guard((self._video or self._segments).close)

    def discard(self) -> None:
        if self._video is not None:
            self._video.discard()
        else:
            self._segments.close()


class ImageFolderSink(Sink):
    """Each annotated frame as an image in ``folder`` (the source's file name, or the index)."""

    needs_image = True

    def __init__(self, folder: str | os.PathLike[str], *, suffix: str = ".jpg",
                 recording: Recording | None = None) -> None:
        self.folder = Path(folder)
        self.recording = recording
        if self.folder.exists() and not self.folder.is_dir():
            raise InputError(f"'{self.folder}' exists and is not a folder",
                             reference=Ref.BAD_OUTPUT_PATH)
        if not self.folder.parent.is_dir():
            raise InputError(f"the parent of '{self.folder}' does not exist",
                             hint=f"create it first: mkdir -p {self.folder.parent}",
                             reference=Ref.BAD_OUTPUT_PATH)
        try:
            self.folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise cannot_write(self.folder.parent, exc) from exc
        check_folder_writable(self.folder)  # a read-only folder fails now, not at a frame
        self._suffix = suffix
        remove_leftovers(self.folder, ".+", ".tmp", "image")

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        if image is None:
            return
        frame = result.frame
        stem = Path(frame.name).stem if frame.name else f"{frame.index:06d}"
        ok, data = cv2().imencode(self._suffix, image)
        if not ok:
            raise InputError(f"OpenCV cannot encode {self._suffix} images",
                             reference=Ref.BAD_OUTPUT_PATH)
        path = self.folder / f"{stem}{self._suffix}"
        if self.recording is None:
            write_whole(path, data.tobytes())
        else:
            self.recording.guard(lambda: write_whole(path, data.tobytes()))


def write_whole(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, renamed into place once on the disk whole, or a
    ``WriteFailedError`` and nothing at ``path``."""
    staged = Staged(path, ".tmp")
    try:
        try:
            staged.tmp.write_bytes(data)
        except OSError as exc:
            raise WriteFailedError(path, exc) from exc
        staged.commit(size=len(data))
    finally:
        staged.discard()


class WindowSink(Sink):
    """An on-screen window; ``q`` or Esc, or closing the window, stops the pipeline."""

    needs_image = True

    def __init__(self, title: str = "edgefuse") -> None:
        self.title = title
        self._opened = False

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        if image is None:
            return
        cv2().imshow(self.title, image)
        self._opened = True
        key = cv2().waitKey(1) & 0xFF
        if key in (ord("q"), 27) or cv2().getWindowProperty(
                self.title, cv2().WND_PROP_VISIBLE) < 1:
            raise SinkClosed(f"window '{self.title}' closed")

    def close(self) -> None:
        if self._opened:
            cv2().destroyWindow(self.title)
            self._opened = False


class CallbackSink(Sink):
    """Calls ``function(result)`` (or ``function(result, image)`` with ``image=True``) per frame;
    a return value of False stops the pipeline."""

    def __init__(self, function: Callable[..., Any], *, image: bool = False) -> None:
        self._function = function
        self.needs_image = image

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        answer = self._function(result, image) if self.needs_image else self._function(result)
        if answer is False:
            raise SinkClosed("the callback returned False")


def display_available() -> bool:
    """Whether a window can be shown: a display server, and an OpenCV built with a GUI."""
    if sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        cv2().namedWindow("edgefuse-probe", cv2().WINDOW_AUTOSIZE)
        cv2().destroyWindow("edgefuse-probe")
    except cv2().error:
        return False
    return True
