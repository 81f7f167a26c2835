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

Why a file written by this run is aged on the monotonic clock: a board without a battery-backed
clock boots in 1970 and steps its clock when NTP answers; measured on the wall clock, every file
written before that step would be 56 years old at once and deleted. Files found at the start
(or by ``rescan``) can only be aged by their modification time against the wall clock then.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
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
    event)."""

    def __init__(self, folder: Path, retention: Retention, *, names: re.Pattern[str] = MEDIA_NAME,
                 pattern: str = "*/*", what: str = "event media",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = Path(folder)
        self.retention = retention
        self.names, self.pattern, self.what = names, pattern, what
        self._clock = clock
        self.deleted = 0
        self._lock = threading.Lock()
        # (modification time, or None; monotonic time of the add, or None; path, size)
        self._files: collections.deque[tuple[float | None, float | None, Path, int]] = (
            collections.deque())
        self._total = 0
        self.rescan()

    @property
    def total_bytes(self) -> int:
        return self._total

    def rescan(self) -> None:
        """List the folder again (oldest first: modification time, then name)."""
        found = []
        for path in self.folder.glob(self.pattern):
            if self.names.fullmatch(path.name):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found.append((stat.st_mtime, path.name, path, stat.st_size))
        # (modification time, or None; monotonic time of the add, or None; path, size)
        with self._lock:
            self._files = collections.deque((mtime, None, path, size)
                                            for mtime, _, path, size in sorted(found))
            self._total = sum(size for *_, size in self._files)

    def add(self, path: Path, now: float | None = None) -> list[Path]:
        """Counts the file just written at ``path`` (aged from now on the monotonic clock), then
        ``enforce`` (``now``: the wall clock, for the files found at the start)."""
        size = path.stat().st_size
        with self._lock:
            self._files.append((None, self._clock(), path, size))
            self._total += size
        return self.enforce(now)

    def enforce(self, now: float | None = None) -> list[Path]:
        """Deletes what is beyond the limits, oldest first; returns what it deleted."""
        now = time.time() if now is None else now  # the wall clock: files found at the start
        now_mono = self._clock()  # files this run added
        limits = self.retention
        gone = []
        with self._lock:
            while self._files:
                mtime, added, path, size = self._files[0]
                age = now - mtime if added is None else now_mono - added
                too_old = limits.max_age_s is not None and age > limits.max_age_s
                too_big = limits.max_bytes is not None and self._total > limits.max_bytes
                too_full = (limits.min_free_bytes is not None
                            and 0 <= free_bytes(self.folder) < limits.min_free_bytes)
                if not (too_old or too_big or too_full):
                    break
                self._files.popleft()
                path.unlink(missing_ok=True)
                self._total -= size
                gone.append(path)
            self.deleted += len(gone)
        if gone:
            log.info("%s in %s: deleted %d file(s) beyond the retention limits (%s .. %s)",
                     self.what, self.folder, len(gone), gone[0].name, gone[-1].name)
        return gone
