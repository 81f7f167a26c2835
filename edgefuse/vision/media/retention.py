"""How long recorded files are kept: by age, by the folder's total, by the disk's free space.

Why all three (Frigate's retention, systemd-journald's ``MaxRetentionSec`` / ``SystemMaxUse`` /
``SystemKeepFree``): age is what a privacy policy states ("footage is kept 7 days"), a total is
what keeps one kind of output from taking the whole card when a busy scene records more than
planned, and a free-space floor is what keeps the card from filling when something else (the
logs, another output) grows. The oldest files go first, by modification time (when each was
written whole), then by name (a segment's or snapshot's name sorts by time; a sequence number
breaks ties), checked after every file written, so a folder never stays over its limit by more
than the file just written.

Only the files of one output are ever counted or deleted (``names``: the event media's names,
one stream's video segments, one JSON Lines file's rotated ``.N`` files), and never the file
being written: it is a hidden temporary, or the live JSON Lines file itself, and neither
matches. Each output has its own budget: segments and JSON Lines in one folder are two.

Why every file is aged on the monotonic clock: a board without a battery-backed clock boots in
1970 and steps its clock when NTP answers, and a clock can be stepped back or forward later;
measured on the wall clock, every file written before the step from 1970 would be 56 years old at
once and deleted, and a step forward of a day would delete a day's files early. A file written by
this run is stamped on the monotonic clock when it is ``add``-ed. A file found on disk (at the
start, or by ``rescan``) can only be aged by its modification time against the wall clock: once,
when it is found, and on the monotonic clock from then on (a modification time ahead of the wall
clock, found while the clock is still behind, counts as just written). A ``rescan`` (rotated
JSON Lines are renamed, ``.1`` to ``.2``) keeps the stamp of every file it already knew: a file
is known by its device, inode, size and modification time, which a rename keeps.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from edgefuse._files import free_bytes

log = logging.getLogger(__name__)

MEDIA_NAME = re.compile(r"\d{8}T\d{6}\.\d{3}Z-[A-Za-z0-9_.-]+\.(?:jpg|mp4)")


@dataclasses.dataclass(frozen=True)
class Retention:
    """Delete an output's files older than ``max_age_s`` seconds, then the oldest beyond
    ``max_bytes`` in all, then the oldest while the file system has less than
    ``min_free_bytes`` free; None: no such limit."""

    max_bytes: int | None = None
    max_age_s: float | None = None
    min_free_bytes: int | None = None

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.max_bytes, self.max_age_s, self.min_free_bytes))


# Event media's default (the event_media key's max_age_h / max_mb): a week, 2 GB.
EVENT_MEDIA = Retention(max_bytes=2_000_000_000, max_age_s=7 * 24 * 3600.0)


class RetainedFolder:
    """Applies a ``Retention`` to the files under ``folder`` that ``pattern`` (a glob relative
    to it) finds and ``names`` matches in full; safe to call from several threads.

    The folder is listed once, at the start (and again by ``rescan``, for files renamed since,
    as rotated JSON Lines are); after that each file written is ``add``-ed, so a check costs
    nothing per file kept (a board holding 20 000 snapshots must not list them all on every
    event). ``clock`` (monotonic) and ``wall`` are the clocks files are aged on (module
    docstring)."""

    def __init__(self, folder: Path, retention: Retention, *, names: re.Pattern[str] = MEDIA_NAME,
                 pattern: str = "*/*", what: str = "event media",
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.folder = Path(folder)
        self.retention = retention
        self.names, self.pattern, self.what = names, pattern, what
        self._clock, self._wall = clock, wall
        self.deleted = 0
        self._lock = threading.Lock()
        self._files: collections.deque[_Kept] = collections.deque()  # oldest first
        self._total = 0
        self.rescan()

    @property
    def total_bytes(self) -> int:
        return self._total

    def rescan(self) -> None:
        """List the folder again, oldest first; a file known before keeps its stamp."""
        found = []
        for path in self.folder.glob(self.pattern):
            if self.names.fullmatch(path.name):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found.append((path, stat))
        with self._lock:
            known = {kept.identity: kept.born for kept in self._files}
            now, now_wall = self._clock(), self._wall()
            kept = [_Kept.of(path, stat, known.get(_identity(stat),
                                                   now - max(0.0, now_wall - stat.st_mtime)))
                    for path, stat in found]
            self._files = collections.deque(sorted(kept, key=_Kept.order))
            self._total = sum(k.size for k in self._files)

    def add(self, path: Path) -> list[Path]:
        """Counts the file just written at ``path`` (aged from now on the monotonic clock), then
        ``enforce``."""
        stat = path.stat()
        with self._lock:
            self._files.append(_Kept.of(path, stat, self._clock()))
            self._total += stat.st_size
        return self.enforce()

    def enforce(self) -> list[Path]:
        """Deletes what is beyond the limits, oldest first; returns what it deleted."""
        now = self._clock()
        limits = self.retention
        gone = []
        with self._lock:
            while self._files:
                oldest = self._files[0]
                too_old = limits.max_age_s is not None and now - oldest.born > limits.max_age_s
                too_big = limits.max_bytes is not None and self._total > limits.max_bytes
                too_full = (limits.min_free_bytes is not None
                            and 0 <= free_bytes(self.folder) < limits.min_free_bytes)
                if not (too_old or too_big or too_full):
                    break
                self._files.popleft()
                oldest.path.unlink(missing_ok=True)
                self._total -= oldest.size
                gone.append(oldest.path)
            self.deleted += len(gone)
        if gone:
            log.info("%s in %s: deleted %d file(s) beyond the retention limits (%s .. %s)",
                     self.what, self.folder, len(gone), gone[0].name, gone[-1].name)
        return gone


@dataclasses.dataclass(frozen=True)
class _Kept:
    """A file counted: ``born``, the monotonic time at which its age was 0."""

    path: Path
    size: int
    mtime: float
    born: float
    identity: tuple[int, int, int, int]

    @classmethod
    def of(cls, path: Path, stat: os.stat_result, born: float) -> _Kept:
        return cls(path, stat.st_size, stat.st_mtime, born, _identity(stat))

    def order(self) -> tuple[float, float, str]:
        """Oldest first: by age; files found equally new (ahead of the wall clock) by their
        modification time, then by name (a sequence number breaks ties)."""
        return self.born, self.mtime, self.path.name


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What a rename keeps and a new file at a reused inode does not."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns
