"""How long event snapshots and clips are kept: by age and by the folder's total size.

Why both: age is what a privacy policy states ("footage is kept 7 days"), size is what keeps a
board's eMMC from filling when a busy scene makes hundreds of events an hour. The oldest files
go first (by modification time, which is when each was written whole), checked after every
write, so the folder never stays over its limit by more than the file just written. Only files this
module's owners wrote (``event media`` names) are ever counted or deleted.

Why a file written by this run is aged on the monotonic clock: a board without a battery-backed
clock boots in 1970 and steps its clock when NTP answers; measured on the wall clock, every file
written before that step would be 56 years old at once and deleted. Files found at the start
can only be aged by their modification time against the wall clock then.
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

log = logging.getLogger(__name__)

MEDIA_NAME = re.compile(r"\d{8}T\d{6}\.\d{3}Z-[A-Za-z0-9_.-]+\.(?:jpg|mp4)")


@dataclasses.dataclass(frozen=True)
class Retention:
    """Delete event media older than ``max_age_h`` hours, then the oldest beyond ``max_mb``
    megabytes (10^6 bytes) in all; None: no such limit."""

    max_age_h: float | None = 24.0 * 7
    max_mb: float | None = 2000.0


class RetainedFolder:
    """Applies a ``Retention`` to the event media under ``folder`` (one sub-folder per stream);
    safe to call from several streams' threads.

    The folder is listed once, at the start; after that each file written is ``add``-ed, so a
    check costs nothing per file kept (a board holding 20 000 snapshots must not list them all
    on every event)."""

    def __init__(self, folder: Path, retention: Retention, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = folder
        self.retention = retention
        self._clock = clock
        self.deleted = 0
        self._lock = threading.Lock()
        found = []
        for path in folder.glob("*/*"):
            if MEDIA_NAME.fullmatch(path.name):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                found.append((stat.st_mtime, path.name, path, stat.st_size))
        # (modification time, or None; monotonic time of the add, or None; path, size)
        self._files = collections.deque((mtime, None, path, size)
                                        for mtime, _, path, size in sorted(found))
        self._total = sum(size for *_, size in self._files)

    @property
    def total_bytes(self) -> int:
        return self._total

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
        max_age_s = None if self.retention.max_age_h is None else self.retention.max_age_h * 3600
        max_bytes = None if self.retention.max_mb is None else self.retention.max_mb * 1e6
        gone = []
        with self._lock:
            while self._files:
                mtime, added, path, size = self._files[0]
                age = now - mtime if added is None else now_mono - added
                too_old = max_age_s is not None and age > max_age_s
                too_big = max_bytes is not None and self._total > max_bytes
                if not (too_old or too_big):
                    break
                self._files.popleft()
                path.unlink(missing_ok=True)
                self._total -= size
                gone.append(path)
            self.deleted += len(gone)
        if gone:
            log.info("event media: deleted %d file(s) beyond the retention limits", len(gone))
        return gone
