"""Frame sources: camera, video file, stream URL, image folder or glob, one image, Python iterable.

Why two reading policies (shared/reference/apps-and-pipelines.md §0.4, §5): a file must lose no
frame, so reading blocks and the pipeline's bounded queues push back on it; a live source
(camera, RTSP/HTTP URL) runs at its own pace, and a reader that queues its frames shows the
scene later and later (the most reported RTSP complaint: ultralytics#11784, yolov5#4465). Live
sources therefore read on their own thread into a one-frame slot: the pipeline takes the newest
frame, and every frame replaced before it was taken is counted as ``dropped``. ``stride`` skips
frames on purpose (``skipped``; files skip with ``grab()``, without decoding).

A stream that drops (a read fails) is re-opened with exponential backoff, logged at WARNING and
counted in ``reconnects``; after ``Reconnect.attempts`` failures in a row the source ends with
``error[source-lost]``. An HTTP MJPEG camera (``multipart/x-mixed-replace``) is read part by part
(``mjpeg_http.py``): a broken JPEG or garbage on the connection is skipped and counted in
``decode_errors`` without a reconnect, which only a broken transport causes. A video file that
ends before the frame count its header announces (a truncated file) says so and counts the
missing frames in ``decode_errors``. Frames after a reconnect (or from a camera that switched
its resolution) may have another size: every frame carries its own geometry downstream.
Cameras ask V4L2 for MJPG (USB cameras give 30 fps in MJPG where raw YUYV gives 10 at 720p) and
a one-frame driver buffer; stream reads time out instead of hanging (OpenCV's
``CAP_PROP_OPEN_TIMEOUT_MSEC`` / ``CAP_PROP_READ_TIMEOUT_MSEC``, the MJPEG reader's socket).

``read(timeout)`` returns the next frame, or None when none came in time or the source is
``finished``. Sources open in their constructor, so an unreadable source fails before any thread
starts (``error[bad-source]``, exit 2 in the apps).
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgefuse._cv import cv2
from edgefuse.errors import InputError, Ref
from edgefuse.vision.streams.frames import Frame
from edgefuse.vision.streams.mjpeg_http import MjpegDevice, NotMjpeg
from edgefuse.vision.streams.stats import PipelineStats

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
STREAM_SCHEMES = frozenset({"rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt"})
_REF = Ref.BAD_SOURCE
_EXHAUSTED = object()  # what next() gives at the end of an iterable source


@dataclasses.dataclass(frozen=True)
class Reconnect:
    """How a live source re-opens after a drop: waits grow from ``backoff_s`` to the maximum."""

    attempts: int | None = 10  # failures in a row before giving up; None: never give up
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 5.0  # open and read timeout of network streams


@dataclasses.dataclass(frozen=True)
class CameraOptions:
    """What to ask a camera for; None leaves the driver's choice."""

    width: int | None = None
    height: int | None = None
    fps: float | None = None
    fourcc: str | None = "MJPG"


class Source:
    """Base of every source: ``read``, ``finished``, ``close``; iterating yields every frame."""

    live = False

    def __init__(self, name: str, stride: int = 1) -> None:
        if not isinstance(stride, int) or stride < 1:
            raise InputError(f"stride must be a positive integer, got {stride!r}", reference=_REF)
        self.name = name
        self.stride = stride
        self.fps: float | None = None
        self.frame_size: tuple[int, int] | None = None  # (width, height), when known early
        self._on_state: Callable[[str, str], None] | None = None
        self._told: list[tuple[str, str]] = []  # states before ``on_state``
        self._finished = False
        self._stats: PipelineStats | None = None
        self._pending: dict[str, int] = {}
        self._count_lock = threading.Lock()

    @property
    def finished(self) -> bool:
        return self._finished

    def read(self, timeout: float | None = None) -> Frame | None:
        raise NotImplementedError

    def close(self) -> None:
        self._finished = True

    def on_state(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(state, detail)`` when a live source goes ``down`` (the device dropped),
        comes back ``up`` (reconnected) or is ``lost`` (gave up; called before the loss is raised,
        while the run's sinks are still open), from the source's reader thread. States told
        before a callback was set are handed to it now, in order."""
        with self._count_lock:
            self._on_state = callback
            told, self._told = self._told, []
        for state, detail in told:
            self._call(callback, state, detail)

    def _tell(self, state: str, detail: str = "") -> None:
        with self._count_lock:
            callback = self._on_state
            if callback is None:
                self._told.append((state, detail))
                return
        self._call(callback, state, detail)

    def _call(self, callback: Callable[[str, str], None], state: str, detail: str) -> None:
        try:
            callback(state, detail)
        except Exception:  # noqa: BLE001 - a listener's failure must not take the stream down
            log.exception("%s: the %s listener failed", self.name, state)

    def attach(self, stats: PipelineStats) -> None:
        """Send counters (dropped, skipped, ...) to ``stats``, those counted so far included."""
        with self._count_lock:
            self._stats = stats
            pending, self._pending = self._pending, {}
        for event, amount in pending.items():
            stats.count(event, amount)

    def _count(self, event: str, amount: int = 1) -> None:
        with self._count_lock:
            if self._stats is None:
                self._pending[event] = self._pending.get(event, 0) + amount
                return
        self._stats.count(event, amount)

    def __iter__(self) -> Iterator[Frame]:
        while True:
            frame = self.read(timeout=0.5)
            if frame is not None:
                yield frame
            elif self.finished:
                return

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {'live' if self.live else 'blocking'}>"


def as_bgr(image: Any, where: str) -> np.ndarray:
    """A uint8 BGR [h, w, 3] frame from an array (grey [h, w] and BGRA are converted)."""
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or min(array.shape[:2]) < 1:
        raise InputError(f"{where}: a frame must be a uint8 [h, w, 3] BGR array, got "
                         f"{array.dtype}{list(array.shape)}", reference=_REF)
    if array.ndim == 2:
        return cv2().cvtColor(array, cv2().COLOR_GRAY2BGR)
    if array.shape[2] == 4:
        return cv2().cvtColor(array, cv2().COLOR_BGRA2BGR)
    if array.shape[2] != 3:
        raise InputError(f"{where}: a frame needs 3 channels, got {array.shape[2]}",
                         reference=_REF)
    return np.ascontiguousarray(array)


# ---- blocking sources --------------------------------------------------------------------------


class _SequentialSource(Source):
    """A source read item by item in order (a capture, an iterable), every ``stride``-th kept."""

    def __init__(self, name: str, stride: int = 1) -> None:
        super().__init__(name, stride)
        self._next = 0  # the index of the next item

    def _next_item(self, skip: Callable[[], bool],
                   take: Callable[[], tuple[bool, Any]]) -> tuple[int, Any] | None:
        """After the first item, ``stride - 1`` items passed with ``skip`` (False: the end) and
        counted as skipped; then one read with ``take``. (index, item), or None, closed, at the
        end."""
        if self._next and self.stride > 1:
            for _ in range(self.stride - 1):
                if not skip():
                    self.close()
                    return None
                self._next += 1
                self._count("skipped")
        ok, item = take()
        if not ok:
            self.close()
            return None
        index, self._next = self._next, self._next + 1
        return index, item


class CaptureSource(_SequentialSource):
    """A video file (or a camera/URL read without dropping): every frame, in order."""

    def __init__(self, name: str, capture: Any, *, stride: int = 1) -> None:
        super().__init__(name, stride)
        self._capture = capture
        fps = capture.get(cv2().CAP_PROP_FPS)
        self.fps = float(fps) if fps and fps > 0 and np.isfinite(fps) else None
        self.frame_size = capture_size(capture)
        count = capture.get(cv2().CAP_PROP_FRAME_COUNT)
        # a file's announced length (None for streams and headers without one: raw H.264
        # gives nonsense, negative or huge)
        self._announced = int(count) if count and 0 < count < 1e8 else None

    def read(self, timeout: float | None = None) -> Frame | None:
        if self._finished:
            return None
        start = time.perf_counter()
        got = self._next_item(self._capture.grab, self._capture.read)
        if got is None:
            if self._next == 0:
                raise InputError(f"no frame could be decoded from '{self.name}'",
                                 hint="check the file with another player; OpenCV reads what "
                                      "its FFmpeg can decode", reference=_REF)
            self._check_complete()
            return None
        index, image = got
        pts = index / self.fps if self.fps else None
        return Frame(index, image, time.time(), time.perf_counter(), pts=pts,
                     decode_s=time.perf_counter() - start)

    def _check_complete(self) -> None:
        """At the end: fewer frames than the header announced is a truncated file (a copy or a
        recording cut short), said and counted (``decode_errors``: the frames lost)."""
        missing = (self._announced or 0) - self._next
        if missing > 0:
            log.warning("%s ended after %d of the %d frames its header announces (a truncated "
                        "file?): %d frame(s) could not be read", self.name, self._next,
                        self._announced, missing)
            self._count("decode_errors", missing)

    def close(self) -> None:
        super().close()
        if self._capture is not None:
            self._capture.release()
            self._capture = None


class ImageSource(Source):
    """Image files, in the order given; an image that fails to decode is skipped and counted."""

    def __init__(self, name: str, paths: list[Path], *, stride: int = 1) -> None:
        super().__init__(name, stride)
        if not paths:
            raise InputError(f"'{name}' holds no images",
                             hint=f"image files end in {', '.join(sorted(IMAGE_SUFFIXES))}",
                             reference=_REF)
        self._paths = paths
        self._position = 0
        self._first: tuple[int, np.ndarray] | None = self._first_decodable()
        self.frame_size = (self._first[1].shape[1], self._first[1].shape[0])

    @property
    def count(self) -> int:
        """The images it will read (every ``stride``-th; one that fails to decode is skipped)."""
        return len(range(0, len(self._paths), self.stride))

    def _first_decodable(self) -> tuple[int, np.ndarray]:
        """The first image the run will read that decodes, decoded now so that a folder where
        none does fails before any output exists (a run of nothing would write empty files)."""
        for index in range(0, len(self._paths), self.stride):
            image = cv2().imread(str(self._paths[index]), cv2().IMREAD_COLOR)
            if image is not None:
                return index, image
        if len(self._paths) == 1:
            raise InputError(f"cannot decode the image '{self._paths[0]}'", reference=_REF)
        raise InputError(f"none of the {len(self._paths)} images of '{self.name}' decodes",
                         context=f"first: {self._paths[0]}",
                         hint="check that the files are images OpenCV reads (not truncated, "
                              "not another format under an image suffix)", reference=_REF)

    def read(self, timeout: float | None = None) -> Frame | None:
        while self._position < len(self._paths):
            index = self._position
            self._position += self.stride
            if self.stride > 1:
                self._count("skipped", min(self.stride, len(self._paths) - index) - 1)
            start = time.perf_counter()
            path = self._paths[index]
            if self._first is not None and self._first[0] == index:
                image, self._first = self._first[1], None
            else:
                image = cv2().imread(str(path), cv2().IMREAD_COLOR)
            if image is None:
                log.warning("%s: cannot decode %s, skipped", self.name, path)
                self._count("unreadable")
                continue
            return Frame(index, image, time.time(), time.perf_counter(), name=path.name,
                         decode_s=time.perf_counter() - start)
        self.close()
        return None


class IterableSource(_SequentialSource):
    """Frames from a Python iterable of BGR uint8 arrays, every one, in order; with ``fps`` (a
    generated camera, a decoded clip) each frame's ``pts`` is its index / ``fps``."""

    def __init__(self, frames: Iterable[Any], *, name: str = "<iterable>",
                 stride: int = 1, fps: float | None = None) -> None:
        super().__init__(name, stride)
        if fps is not None and not (isinstance(fps, (int, float)) and math.isfinite(fps)
                                    and fps > 0):
            raise InputError(f"fps must be a positive number, got {fps!r}", reference=_REF)
        self._frames = iter(frames)
        self.fps = None if fps is None else float(fps)

    def read(self, timeout: float | None = None) -> Frame | None:
        if self._finished:
            return None
        start = time.perf_counter()
        got = self._next_item(self._skip, self._take)
        if got is None:
            return None
        index, item = got
        image = as_bgr(item, f"{self.name} frame {index}")
        return Frame(index, image, time.time(), time.perf_counter(),
                     pts=index / self.fps if self.fps else None,
                     decode_s=time.perf_counter() - start)

    def _skip(self) -> bool:
        return next(self._frames, _EXHAUSTED) is not _EXHAUSTED

    def _take(self) -> tuple[bool, Any]:
        item = next(self._frames, _EXHAUSTED)
        return item is not _EXHAUSTED, item


# ---- live sources ------------------------------------------------------------------------------


class Device(Protocol):
    """What a live source reads from: OpenCV's VideoCapture, or an adapter with the same calls."""

    def read(self) -> tuple[bool, Any]: ...

    def release(self) -> None: ...


class _IteratorDevice:
    """A Python iterator as a device: exhausted means the stream ended (no reconnect)."""

    def __init__(self, frames: Iterable[Any]) -> None:
        self._frames = iter(frames)

    def read(self) -> tuple[bool, Any]:
        try:
            return True, next(self._frames)
        except StopIteration:
            return False, None

    def release(self) -> None:
        close = getattr(self._frames, "close", None)
        if close is not None:
            close()


class LiveSource(Source):
    """Reads a device on its own thread and keeps only the newest frame (see the docstring).

    ``opener`` makes the device (raising ``InputError`` when it cannot); with ``reconnect`` it is
    called again after a drop. Without it, the end of the device is the end of the source.
    """

    live = True

    def __init__(self, name: str, opener: Callable[[], Device], *, stride: int = 1,
                 reconnect: Reconnect | None = None, fps: float | None = None,
                 frame_size: tuple[int, int] | None = None) -> None:
        super().__init__(name, stride)
        self.frame_size = frame_size
        self._opener = opener
        self._reconnect = reconnect
        self._device: Device | None = opener()
        self.fps = fps
        self._slot: Frame | None = None
        self._error: BaseException | None = None
        self._ready = threading.Condition()
        self._stop = threading.Event()
        self._sequence = 0
        self._decode_errors = 0  # the current device's count, as last seen
        self._thread = threading.Thread(target=self._read_loop, name=f"edgefuse-live-{name}",
                                        daemon=True)
        self._thread.start()

    def read(self, timeout: float | None = None) -> Frame | None:
        with self._ready:
            self._ready.wait_for(lambda: self._slot is not None or self._finished, timeout)
            frame, self._slot = self._slot, None
            if frame is None and self._error is not None:
                error, self._error = self._error, None
                raise error
            return frame

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            wait = (self._reconnect.timeout_s if self._reconnect else 1.0) + 1.0
            self._thread.join(timeout=wait)
            if self._thread.is_alive():
                log.warning("%s: the reader is still blocked in a read after %.0f s; left to "
                            "end on its own", self.name, wait)
        self._mark_finished()

    def _mark_finished(self) -> None:
        with self._ready:
            self._finished = True
            self._ready.notify_all()

    def _read_loop(self) -> None:
        try:
            while not self._stop.is_set():
                start = time.perf_counter()
                ok, image = self._device.read() if self._device is not None else (False, None)
                self._count_decode_errors()
                if not ok:
                    if self._reconnect is None or self._stop.is_set():
                        break
                    self._reopen(self._reconnect)
                    continue
                self._publish(image, time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - raised again in the thread that reads frames
            self._error = exc
        finally:
            if self._device is not None:
                self._device.release()
                self._device = None
            self._mark_finished()

    def _count_decode_errors(self) -> None:
        """The frames the device skipped as undecodable since the last read (a device that
        counts them, ``decode_errors``: the MJPEG reader)."""
        errors = getattr(self._device, "decode_errors", 0)
        if errors > self._decode_errors:
            self._count("decode_errors", errors - self._decode_errors)
        self._decode_errors = errors

    def _publish(self, image: Any, decode_s: float) -> None:
        index, self._sequence = self._sequence, self._sequence + 1
        if index % self.stride:
            self._count("skipped")
            self._drop(image)
            return
        frame = self._make_frame(index, image, decode_s)
        with self._ready:
            stale = self._slot is not None
            self._slot = frame
            self._ready.notify_all()
        if stale:
            self._count("dropped")

    def _make_frame(self, index: int, image: Any, decode_s: float) -> Frame:
        """The frame of what the device read (a subclass whose device reads something else,
        e.g. a DVPP picture, makes its own)."""
        return Frame(index, as_bgr(image, f"{self.name} frame {index}"), time.time(),
                     time.perf_counter(), decode_s=decode_s)

    def _drop(self, image: Any) -> None:
        """What the device read, skipped by ``stride`` (a subclass may give it back)."""

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` before a reconnect attempt; True when the source was closed meanwhile
        (a seam: tests check the backoff waits without spending them)."""
        return self._stop.wait(seconds)

    def _reopen(self, policy: Reconnect) -> None:
        """Re-open the device with backoff; raises ``error[source-lost]`` when it gives up."""
        if self._device is not None:
            self._device.release()
            self._device = None
        self._count("drops")
        self._tell("down", "the stream dropped")
        wait = policy.backoff_s
        for attempt in itertools.count(1):
            if policy.attempts is not None and attempt > policy.attempts:
                why = f"{policy.attempts} reconnect attempts failed"
                self._tell("lost", why)
                raise InputError(f"lost the stream '{self.name}': {why}",
                                 hint="check the camera or server; raise reconnect attempts in "
                                      "the config to wait longer", reference=Ref.SOURCE_LOST)
            log.warning("%s: stream dropped; reconnecting in %.1f s (attempt %d%s)", self.name,
                        wait, attempt, f"/{policy.attempts}" if policy.attempts else "")
            if self._pause(wait):
                return
            try:
                self._device = self._opener()
                self._decode_errors = 0
            except InputError as exc:
                log.warning("%s: reconnect attempt %d failed: %s", self.name, attempt,
                            exc.message)
                wait = min(wait * 2, policy.max_backoff_s)
                continue
            self._count("reconnects")
            log.warning("%s: reconnected (attempt %d)", self.name, attempt)
            self._tell("up", f"reconnected (attempt {attempt})")
            return


# ---- opening -----------------------------------------------------------------------------------


def open_source(spec: Any, *, stride: int = 1, live: bool | None = None,
                reconnect: Reconnect = Reconnect(),
                camera: CameraOptions = CameraOptions()) -> Source:
    """A source for ``spec``: a camera index (int or digits), a URL, a video file, an image file,
    a folder or glob of images, a numpy frame, an iterable of frames, or a ``Source``.

    ``live`` overrides the policy (default: cameras and stream URLs are live, the rest blocks);
    a live iterable stands for a producer faster than the pipeline.
    """
    if isinstance(spec, Source):
        return spec
    if isinstance(spec, np.ndarray):
        return IterableSource([spec], name="<frame>", stride=stride)
    if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
        return _camera(int(spec), stride, live, reconnect, camera)
    if isinstance(spec, str) and "://" in spec:
        return _stream(spec, stride, live, reconnect)
    if isinstance(spec, (str, os.PathLike)):
        return _path_source(Path(spec), stride, live)
    if isinstance(spec, Iterable):
        if live:
            return LiveSource("<iterable>", lambda: _IteratorDevice(spec), stride=stride)
        return IterableSource(spec, stride=stride)
    raise InputError(f"cannot read frames from a {type(spec).__name__}",
                     hint="give a camera index, a URL, a video or image path, a folder, a glob, "
                          "or an iterable of BGR uint8 arrays", reference=_REF)


def _path_source(path: Path, stride: int, live: bool | None) -> Source:
    text = str(path)
    if path.is_dir():
        images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        return ImageSource(text, images, stride=stride)
    if path.is_file():
        if path.suffix.lower() in IMAGE_SUFFIXES:
            return ImageSource(text, [path], stride=stride)
        return _video(text, stride, live)
    if glob.has_magic(text):
        images = sorted(Path(p) for p in glob.glob(text, recursive=True)
                        if Path(p).suffix.lower() in IMAGE_SUFFIXES)
        return ImageSource(text, images, stride=stride)
    raise InputError(f"the source '{text}' does not exist",
                     hint="give a camera index, a URL, a video or image file, a folder or a glob",
                     reference=_REF)


def _video(path: str, stride: int, live: bool | None) -> Source:
    def opener() -> Any:
        capture = cv2().VideoCapture(path)
        if not capture.isOpened():
            cut_short = ("an MP4/MOV file cut short (a copy or a recording that did not finish) "
                         "has no index (its 'moov atom') and no frame of it can be read; "
                         "record to MKV or fragmented MP4 to keep what came before a cut. "
                         if Path(path).suffix.lower() in (".mp4", ".mov", ".m4v") else "")
            raise InputError(f"cannot open the video '{path}'",
                             hint=f"{cut_short}check the file with another player; OpenCV "
                                  "reads what its FFmpeg can decode", reference=_REF)
        return capture

    if live:
        return LiveSource(path, opener, stride=stride)
    return CaptureSource(path, opener(), stride=stride)


def _stream(url: str, stride: int, live: bool | None, reconnect: Reconnect) -> Source:
    scheme = url.split("://", 1)[0].lower()
    timeout_ms = int(reconnect.timeout_s * 1000)

    def opener() -> Any:
        params = [cv2().CAP_PROP_OPEN_TIMEOUT_MSEC, timeout_ms,
                  cv2().CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms]
        capture = cv2().VideoCapture(url, cv2().CAP_FFMPEG, params)
        if not capture.isOpened():
            raise InputError(f"cannot open the stream '{url}'",
                             hint="check the URL, the network and that the server is up",
                             reference=_REF)
        return capture

    if live is False or (live is None and scheme not in STREAM_SCHEMES):
        return CaptureSource(url, opener(), stride=stride)
    if scheme in ("http", "https"):
        try:
            first = MjpegDevice(url, reconnect.timeout_s)
        except NotMjpeg:  # another kind of HTTP stream (MP4, HLS): FFmpeg's
            return _live(url, opener, stride, reconnect)
        return _live(url, lambda: _mjpeg_again(url, reconnect.timeout_s), stride, reconnect,
                     first=first)
    return _live(url, opener, stride, reconnect)


def _mjpeg_again(url: str, timeout_s: float) -> MjpegDevice:
    """The MJPEG camera at ``url`` once more (a reconnect): one that now answers with something
    else is a failed attempt, as one that does not answer."""
    try:
        return MjpegDevice(url, timeout_s)
    except NotMjpeg as exc:
        raise InputError(f"the stream '{url}' no longer serves MJPEG ({exc})",
                         reference=_REF) from exc


def _camera(index: int, stride: int, live: bool | None, reconnect: Reconnect,
            options: CameraOptions) -> Source:
    def opener() -> Any:
        backend = cv2().CAP_V4L2 if sys.platform.startswith("linux") else cv2().CAP_ANY
        capture = cv2().VideoCapture(index, backend)
        if not capture.isOpened():
            raise InputError(f"cannot open camera {index}",
                             hint="list cameras with `v4l2-ctl --list-devices`; check that no "
                                  "other program holds it", reference=_REF)
        _configure_camera(capture, index, options)
        return capture

    name = f"camera {index}"
    if live is False:
        return CaptureSource(name, opener(), stride=stride)
    return _live(name, opener, stride, reconnect)


def _live(name: str, opener: Callable[[], Any], stride: int, reconnect: Reconnect, *,
          first: Any = None) -> Source:
    """A live source on ``opener``'s capture: the first is opened now (a wrong URL or camera
    fails here; or given as ``first``), later ones when the source reconnects."""
    device = opener() if first is None else first
    fps = device.get(cv2().CAP_PROP_FPS)
    first = [device]

    def reopen() -> Any:
        return first.pop() if first else opener()

    return LiveSource(name, reopen, stride=stride, reconnect=reconnect,
                      fps=float(fps) if fps and fps > 0 else None,
                      frame_size=capture_size(device))


def capture_size(capture: Any) -> tuple[int, int] | None:
    """An OpenCV capture's (width, height) as its header tells it, None when it does not."""
    try:
        width = float(capture.get(cv2().CAP_PROP_FRAME_WIDTH))
        height = float(capture.get(cv2().CAP_PROP_FRAME_HEIGHT))
    except (TypeError, ValueError):
        return None
    if 0 < width < math.inf and 0 < height < math.inf:
        return int(width), int(height)
    return None


def _configure_camera(capture: Any, index: int, options: CameraOptions) -> None:
    """Ask for MJPG (before the size: V4L2 picks sizes per format), the size, fps, 1 buffer."""
    if options.fourcc:
        capture.set(cv2().CAP_PROP_FOURCC, cv2().VideoWriter_fourcc(*options.fourcc))
    if options.width:
        capture.set(cv2().CAP_PROP_FRAME_WIDTH, options.width)
    if options.height:
        capture.set(cv2().CAP_PROP_FRAME_HEIGHT, options.height)
    if options.fps:
        capture.set(cv2().CAP_PROP_FPS, options.fps)
    capture.set(cv2().CAP_PROP_BUFFERSIZE, 1)
    code = int(capture.get(cv2().CAP_PROP_FOURCC))
    got = "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4)) if code else "?"
    log.info("camera %d: %s %dx%d at %s fps", index, got,
             int(capture.get(cv2().CAP_PROP_FRAME_WIDTH)),
             int(capture.get(cv2().CAP_PROP_FRAME_HEIGHT)), capture.get(cv2().CAP_PROP_FPS))
    if options.fourcc and got != options.fourcc:
        log.info("camera %d does not offer %s; reading %s", index, options.fourcc, got)
