"""Outputs of a run that does not end: JSON Lines appended as they come, video in segments.

Why not the file sources' temporary-then-rename: a service runs for months, and an output that
appears only at the end shows nothing to a user tailing it or a log shipper, and loses
everything since the start to a crash, an OOM kill or a power cut. So, for live sources:

- JSON Lines are appended to the configured path, each record one ``write`` of one whole line
  on an ``O_APPEND`` descriptor: the line is in the kernel when ``write`` returns, so a
  ``kill -9`` leaves only whole lines, and ``fsync`` runs at least every ``SYNC_S`` so a power
  cut loses at most that much. A last line cut anyway (a power cut mid-write) is removed when
  the file is opened again. ``Rotation(max_mb, keep)`` renames a file that reached ``max_mb``
  to ``<name>.1`` (``.1`` to ``.2``, ..., the oldest beyond ``keep`` deleted: the scheme of
  logrotate and Python's RotatingFileHandler, which log shippers follow), so a disk never fills.
- Video is written in segments of ``segment_s`` seconds of capture time, each a file of its own
  (``<stem>-<sequence>-<UTC start><suffix>``, e.g. ``out-000042-20260101T120000Z.mp4``), written
  under a temporary name and renamed when it is finished, so each one that appears is playable
  and a crash loses at most the current one; ``keep`` deletes the oldest beyond that count.

Why a sequence number in segment names: a board without a battery-backed clock boots in 1970 and
steps its clock when NTP answers, and a clock can be stepped back. A name made of the wall clock
alone can then repeat, and sorts a newer segment before an older one, so ``keep`` would delete
the newest. The sequence number (one more than the highest in the folder, so it goes on across
restarts) orders the segments and keeps their names apart; the UTC time is only there for a
reader. A segment's length is measured on the frames' monotonic capture clock, so a step does not
cut a segment at once (forward) or keep one open for an hour (back).

Both take a ``Retention`` (``retain``: age, total bytes, the disk's free space), applied to the
rotated ``.N`` files and to the finished segments (never the file being written), oldest first,
after each rotation and as each segment starts and ends (``edgefuse.vision.media.retention``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from pathlib import Path

from edgefuse._files import FILE_MODE, WriteFailedError, check_output_path
from edgefuse.vision.media.retention import RetainedFolder, Retention
from edgefuse.vision.streams.staging import free_name, keep_whole_lines, remove_leftovers

log = logging.getLogger(__name__)

SYNC_S = 1.0
_SEGMENT_TIME = r"\d{8}T\d{6}Z(?:-\d+)?"  # the names before sequence numbers (removed by keep)
_SEQUENCE = r"(\d{6,})-"  # the names since: <stem>-<sequence>-<UTC start><suffix>


@dataclasses.dataclass(frozen=True)
class Rotation:
    """Rotate a JSON Lines file at ``max_mb`` megabytes (10^6 bytes), keeping ``keep`` old ones."""

    max_mb: float = 100.0
    keep: int = 10


class AppendedLines:
    """Lines appended to ``path`` (see the module docstring); errors name ``target`` (the file a
    staged ``path`` becomes), else ``path``."""

    def __init__(self, path: str | os.PathLike[str], rotate: Rotation | None = None, *,
                 target: str | os.PathLike[str] | None = None,
                 retain: Retention | None = None) -> None:
        self.path = Path(path)
        self.target = Path(target or path)
        self.retained = None if retain is None or rotate is None else RetainedFolder(
            self.path.parent, retain, names=re.compile(re.escape(self.path.name) + r"\.\d+"),
            pattern="*", what="rotated JSON Lines")
        check_output_path(self.path)
        self.rotate = rotate
        if self.path.is_file():
            cut = keep_whole_lines(self.path)
            if cut:
                log.warning("%s: removed a last line cut by an earlier crash (%d bytes)",
                            self.path, cut)
        self._fd: int | None = None
        self._open()
        self._synced = time.monotonic()

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        self.size = os.fstat(self._fd).st_size

    def write(self, line: str) -> None:
        """Append ``line`` whole, or raise ``WriteFailedError`` with the file as it was before
        (a line cut by a full disk is cut off again: a reader never sees half a record)."""
        data = line.encode("utf-8")
        try:
            if self._fd is None:  # a rotation that failed half-way: open again
                self._open()
            if (self.rotate is not None and self.size
                    and self.size + len(data) > self.rotate.max_mb * 1e6):
                self._rotate()
            written = os.write(self._fd, data)
            while written < len(data):  # a full disk takes part; a pipe or FIFO may too
                written += os.write(self._fd, data[written:])
            self.size += len(data)
            now = time.monotonic()
            if now - self._synced >= SYNC_S:
                os.fsync(self._fd)
                self._synced = now
        except OSError as exc:
            self._cut_back()
            raise WriteFailedError(self.target, exc) from exc

    def _cut_back(self) -> None:
        """Remove what a failed write left past the last whole line."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self.size)
        except OSError:  # the file is still cut; its next opening removes the cut line
            log.warning("%s: could not remove a line cut by a failed write", self.path)

    def close(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        except OSError as exc:
            raise WriteFailedError(self.target, exc) from exc
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        self.close()
        keep = self.rotate.keep
        oldest = self.path.with_name(f"{self.path.name}.{keep}")
        oldest.unlink(missing_ok=True)
        for number in range(keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{number}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{number + 1}"))
        if keep:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink()
        log.info("%s reached %g MB: rotated", self.path, self.rotate.max_mb)
        self._open()
        if self.retained is not None:  # the .N files were renamed: list them again
            self.retained.rescan()
            self.retained.enforce()


class VideoSegments:
    """Frames into ``segment_s``-second video files next to ``path`` (the module docstring).

    ``open_segment(path, fps)`` makes the writer of one segment (``VideoFile``): a file renamed
    into place when closed.
    """

    def __init__(self, path: str | os.PathLike[str], open_segment, *, segment_s: float,
                 keep: int | None = None, fps: float | None = None,
                 retain: Retention | None = None) -> None:
        self.path = Path(path)
        check_output_path(self.path)
        self.segment_s = segment_s
        self.keep = keep
        self.fps = fps
        self._open_segment = open_segment
        self._current = None
        self._started = 0.0
        self.finished: list[Path] = []
        remove_leftovers(self.path.parent, self._segment_names(), self.path.suffix.lower(),
                         "video segment")
        self._sequence = max((number for number, _ in self._existing()), default=0) + 1
        self.retained = None if retain is None else RetainedFolder(
            self.path.parent, retain, names=re.compile(self._segment_names()), pattern="*",
            what="video segments")

    def write(self, image, at: float, media: float | None = None,
              mono: float | None = None) -> None:
        """Add ``image``, captured at ``at`` (wall clock, seconds since the epoch: the name) and
        ``mono`` (a monotonic clock, seconds: the segment's length; None: now), shown at
        ``media`` (seconds, any origin; None: at the segment's frame rate)."""
        mono = time.perf_counter() if mono is None else mono
        if self._current is not None and mono - self._started >= self.segment_s:
            self._finish()
        if self._current is None:
            if self.retained is not None:  # room for the segment about to start
                self.retained.enforce()
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(max(at, 0.0)))
            name = free_name(self.path.with_name(
                f"{self.path.stem}-{self._sequence:06d}-{stamp}{self.path.suffix}"))
            self._sequence += 1
            self._current = self._open_segment(name, self.fps)
            self._current_path = name
            self._started = mono
        try:
            self._current.write(image, media)
        except BaseException:  # a full disk: this segment is lost whole, the next starts anew
            current, self._current = self._current, None
            current.discard()
            raise

    def close(self) -> None:
        if self._current is not None:
            self._finish()

    def _finish(self) -> None:
        current, self._current = self._current, None
        current.close()  # a failure removes the segment and raises
        if current.frames:
            self.finished.append(self._current_path)
            log.info("video segment %s finished (%d frames)", self._current_path, current.frames)
            if self.retained is not None:
                self.retained.add(self._current_path)
        if self.keep is not None:
            segments = [path for _, path in sorted(self._existing())]
            for old in segments[:max(len(segments) - self.keep, 0)]:
                old.unlink(missing_ok=True)

    def _existing(self) -> list[tuple[int, Path]]:
        """The finished segments in the folder, with their order: the sequence number, or 0 for
        a name written before sequence numbers (the oldest)."""
        pattern = re.compile(self._segment_names())
        found = []
        for path in self.path.parent.iterdir():
            match = pattern.fullmatch(path.name)
            if match:
                found.append((int(match.group(1) or 0), path))
        return found

    def _segment_names(self) -> str:
        return (re.escape(self.path.stem) + "-" + f"(?:{_SEQUENCE})?" + _SEGMENT_TIME
                + re.escape(self.path.suffix))
