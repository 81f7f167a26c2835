"""One video file written whole: H.264 in MP4 through PyAV in a thread of its own, else OpenCV.

Why a thread of its own: encoding a 1080p frame costs a few milliseconds of CPU, and done in the
pipeline's sink stage it would add to every frame's latency and, once the sink is the slowest
stage, cap the frame rate. Frames are handed over through a short bounded queue (a file source
waits when it is full, never drops); libx264 and the colour conversion release the GIL, so the
encoding runs beside inference (bench/video_writer.py measures it).

Why OpenCV stays as the fallback: a board or a laptop without PyAV still gets its video, as
MPEG-4 Part 2 (``mp4v``) that players other than browsers play; the first such file says so
once, with the install that fixes it. ``.avi`` is always Motion JPEG through OpenCV (H.264 in AVI
is a hack players disagree on).

Either way the file is written under a temporary name and renamed into place when closed with
frames in it; a run that wrote none, or failed while writing, leaves nothing. Every failure to
write (PyAV's errors carry the errno; OpenCV's writer only returns False, and its finished file
is opened again and its frames counted) is a ``WriteFailedError`` naming the file.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from edgefuse._cv import cv2
from edgefuse._files import WriteFailedError, check_folder_writable, check_output_path
from edgefuse.errors import InputError, Ref
from edgefuse.vision.media.h264 import CONTAINERS, H264Encoder, Mp4File, h264_available
from edgefuse.vision.streams.staging import Staged

log = logging.getLogger(__name__)

OPENCV_CODECS = {".mp4": "mp4v", ".m4v": "mp4v", ".mov": "mp4v", ".avi": "MJPG", ".mkv": "MJPG"}
VIDEO_SUFFIXES = tuple(OPENCV_CODECS)
DEFAULT_FPS = 30.0
QUEUE_FRAMES = 4  # frames waiting for the encoder thread
_END = None
_warned_fallback = threading.Event()


def check_video_suffix(path: Path) -> str:
    """The lower-case suffix of the video ``path`` names; a user error for any other."""
    suffix = path.suffix.lower()
    if suffix not in OPENCV_CODECS:
        raise InputError(f"cannot tell the video format of '{path}'",
                         hint=f"end the name in one of {', '.join(VIDEO_SUFFIXES)}, or give "
                              "a folder to save images", reference=Ref.BAD_OUTPUT_PATH)
    return suffix


def writes_h264(path: Path) -> bool:
    """Whether a video at ``path`` is written as H.264 (PyAV there, a container that takes it)."""
    return path.suffix.lower() in CONTAINERS and h264_available()


class VideoFile:
    """Frames into the video ``path`` names (see the module docstring); ``write`` per frame,
    ``close`` once. Its size is the first frame's (later ones are resized)."""

    def __init__(self, path: str | os.PathLike[str], *, fps: float | None = None) -> None:
        self.path = Path(path)
        suffix = check_video_suffix(self.path)
        check_folder_writable(check_output_path(self.path))  # now, not at the first frame
        self.fps = fps
        self.frames = 0
        self.h264 = writes_h264(self.path)
        if not self.h264 and suffix in CONTAINERS and not _warned_fallback.is_set():
            _warned_fallback.set()
            log.warning("PyAV is not installed: %s is written by OpenCV as MPEG-4 Part 2, which "
                        "browsers do not play; pip install 'edgefuse[vision]' for H.264",
                        self.path)
        self._writer: _Writer | None = None
        self._size: tuple[int, int] | None = None
        self._closed = False

    def write(self, image: np.ndarray, at: float | None = None) -> None:
        """Add ``image`` (BGR uint8), shown at ``at`` seconds (any origin, increasing; None:
        one frame period after the last)."""
        try:
            if self._writer is None:
                self._size = (image.shape[1], image.shape[0])
                fps = self.fps or DEFAULT_FPS
                self._writer = (_H264Writer(self.path, self._size, fps) if self.h264
                                else _OpenCvWriter(self.path, self._size, fps))
            if (image.shape[1], image.shape[0]) != self._size:
                image = cv2().resize(image, self._size, interpolation=cv2().INTER_AREA)
            self._writer.write(image,
                               self.frames / (self.fps or DEFAULT_FPS) if at is None else at)
        except OSError as exc:
            raise WriteFailedError(self.path, exc) from exc
        self.frames += 1

    def finish(self) -> None:
        """Everything encoded and written to the temporary file, checked, not yet renamed: the
        failure of a full disk at the very end is raised here (nothing is left then)."""
        if self._writer is not None and not self._closed:
            try:
                self._writer.flush()
            except (OSError, WriteFailedError) as exc:
                self._closed = True
                self._writer.finish(keep=False, quiet=True)
                if isinstance(exc, WriteFailedError):
                    raise
                raise WriteFailedError(self.path, exc) from exc

    def close(self) -> None:
        """Finish and rename into place; with no frame written, nothing is left. A failure of
        the encoder (a full disk) is raised here if no ``write`` raised it yet, and the
        temporary file is removed."""
        if self._closed:
            return
        self.finish()
        self._closed = True
        if self._writer is None:
            log.warning("no frame reached %s; nothing written", self.path)
            return
        try:
            self._writer.finish(keep=self.frames > 0)
        except OSError as exc:
            raise WriteFailedError(self.path, exc) from exc

    def discard(self) -> None:
        """End without keeping anything."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.finish(keep=False, quiet=True)


class _Writer:
    """``write`` per frame, ``flush`` (all into the temporary file, raising what failed), then
    ``finish`` once (renamed with ``keep``, else removed; ``quiet``: raising nothing)."""

    def write(self, image: np.ndarray, at: float) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def finish(self, *, keep: bool, quiet: bool = False) -> None:
        raise NotImplementedError


class _H264Writer(_Writer):
    """Encodes and muxes in a thread of its own; its first error is raised to the writer."""

    def __init__(self, path: Path, size: tuple[int, int], fps: float) -> None:
        self._encoder = H264Encoder(*size, fps=fps)
        self._file = Mp4File(path, self._encoder.width, self._encoder.height, fps=fps)
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_FRAMES)
        self._error: BaseException | None = None
        self._reported = False
        self._thread = threading.Thread(target=self._run, name="edgefuse-video", daemon=True)
        self._thread.start()

    def write(self, image: np.ndarray, at: float) -> None:
        if self._error is not None:
            self._reported = True
            raise self._error
        self._queue.put((image, at))

    def flush(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_END)
            self._thread.join()
        if self._error is None:
            try:
                self._file.finish()
            except BaseException as exc:  # noqa: BLE001 - raised below, as the encoder's are
                self._error = exc
        if self._error is not None and not self._reported:
            self._reported = True
            raise self._error

    def finish(self, *, keep: bool, quiet: bool = False) -> None:
        try:
            self.flush()
        except BaseException:
            self._file.discard()
            if not quiet:
                raise
            return
        if keep and self._error is None:
            self._file.commit()
            return
        self._file.discard()

    def _run(self) -> None:
        ended = False
        try:
            while (item := self._queue.get()) is not _END:
                self._file.write(self._encoder.encode(*item))
            ended = True
            self._file.write(self._encoder.flush())
        except BaseException as exc:  # noqa: BLE001 - raised to the writer by write/finish
            self._error = exc
            while not ended and self._queue.get() is not _END:  # the writer may still put
                pass


class _OpenCvWriter(_Writer):
    def __init__(self, path: Path, size: tuple[int, int], fps: float) -> None:
        codec = OPENCV_CODECS[path.suffix.lower()]
        self._file = Staged(path, path.suffix.lower())
        self._writer = cv2().VideoWriter(str(self._file.tmp), cv2().VideoWriter_fourcc(*codec),
                                         fps, size)
        if not self._writer.isOpened():
            self._file.discard()
            raise InputError(f"OpenCV cannot write {codec} video to '{path}'",
                             reference=Ref.BAD_OUTPUT_PATH)
        self._frames = 0
        self._released = False

    def write(self, image: np.ndarray, at: float) -> None:
        # OpenCV's FFmpeg writer says no more than False (4.x; None before: unchecked then)
        if self._writer.write(np.ascontiguousarray(image)) is False:
            raise WriteFailedError(self._file.path, what=f"OpenCV's video writer refused frame "
                                                         f"{self._frames}")
        self._frames += 1

    def flush(self) -> None:
        if self._released:
            return
        self._released = True
        self._writer.release()
        capture = cv2().VideoCapture(str(self._file.tmp))
        try:
            found = int(capture.get(cv2().CAP_PROP_FRAME_COUNT)) if capture.isOpened() else 0
        finally:
            capture.release()
        if found != self._frames:
            raise WriteFailedError(self._file.path, what=f"the finished file holds {found} of "
                                                         f"the {self._frames} frames written")

    def finish(self, *, keep: bool, quiet: bool = False) -> None:
        try:
            self.flush()
        except WriteFailedError:
            self._file.discard()
            if not quiet:
                raise
            return
        if keep:
            self._file.commit()
        else:
            self._file.discard()


def write_video(path: str | os.PathLike[str], frames: Iterable[np.ndarray], fps: float) -> int:
    """Write BGR uint8 ``frames`` to ``path`` (all or nothing); returns how many were written."""
    video = VideoFile(path, fps=fps)
    try:
        for frame in frames:
            video.write(frame)
    except BaseException:
        video.discard()
        raise
    video.close()
    if not video.frames:
        raise InputError(f"no frames to write to '{path}'", hint="give at least one frame",
                         reference=Ref.BAD_ARGUMENT)
    return video.frames
