"""A live run's recordings: a write that fails stops one recording, never the stream.

Why: a camera service's job is the detections, the tracks and the events; the files it records
are a by-product. When the card fills (or the file system goes read-only), a one-shot run must
fail loudly (``error[disk-full]``, exit 2, nothing incomplete left), but a live run that stopped
on it would lose the events too, and systemd restarting it would change nothing. So each file
sink of a live source gets a ``Recording``: the first failed write (``WriteFailedError``) stops
that sink's recording with one log line that names the file, the reason and what goes on; the
frames meanwhile are counted, not written; every ``RETRY_S`` of the monotonic clock, once its
folder has ``resume_free_bytes`` free again (``df``'s Avail), the next frame is tried, and a
success resumes it with one more log line. ``Recordings`` holds them all for ``/healthz`` (the
run stays healthy: a restart frees no space) and ``/metrics``
(``edgefuse_sink_errors_total{stream,sink,reason}``, ``edgefuse_sink_recording{stream,sink}``,
``edgefuse_disk_free_bytes{path}``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgefuse._files import WriteFailedError, free_bytes

log = logging.getLogger(__name__)

RETRY_S = 1.0
RESUME_FREE_BYTES = 1 << 20  # a segment's first seconds, a few hundred JSON lines


class Recording:
    """The write state of one live sink (module docstring): ``due`` before a write, then
    ``failed`` or ``succeeded``."""

    def __init__(self, stream: str, sink: str, folder: Path, *,
                 resume_free_bytes: int = RESUME_FREE_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.sink, self.folder = stream, sink, Path(folder)
        self.resume_free_bytes = resume_free_bytes
        self.errors: collections.Counter[str] = collections.Counter()
        self.reason: str | None = None  # why it is suspended; None while recording
        self.skipped = 0  # frames not recorded since the last failure
        self.not_recorded = 0  # frames not recorded in all
        self._clock = clock
        self._since = 0.0
        self._tried = 0.0
        self._lock = threading.Lock()  # the sink thread writes, a source's thread notes

    @property
    def recording(self) -> bool:
        return self.reason is None

    def due(self) -> bool:
        """Whether to write now: while recording, always; while suspended, once every
        ``RETRY_S`` when the folder has room again (else the frame is counted as skipped)."""
        with self._lock:
            if self.reason is None:
                return True
            now = self._clock()
            if (now - self._tried >= RETRY_S
                    and free_bytes(self.folder) >= self.resume_free_bytes):
                self._tried = now
                return True
            self.skipped += 1
            self.not_recorded += 1
            return False

    def failed(self, error: WriteFailedError) -> None:
        with self._lock:
            self.errors[error.reason] += 1
            first = self.reason is None
            self.reason = error.reason
            self._tried = self._clock()
            if first:
                self._since = self._tried
                self.skipped = 0
        if first:
            log.error("%s %s: recording stopped: %s; inference, tracking and events go on, "
                      "and recording resumes once %s has %d MiB free", self.stream, self.sink,
                      error.message, self.folder, self.resume_free_bytes >> 20)

    def succeeded(self) -> None:
        if self.reason is None:
            return
        with self._lock:
            self.reason = None
            gap, skipped = self._clock() - self._since, self.skipped
        log.warning("%s %s: recording resumed after %.1f s (%d frame(s) not recorded)",
                    self.stream, self.sink, gap, skipped)

    def guard(self, write: Callable[[], Any]) -> None:
        """``write()`` when ``due``; a ``WriteFailedError`` it raises suspends the recording."""
        if not self.due():
            return
        try:
            write()
        except WriteFailedError as error:
            self.failed(error)
            return
        self.succeeded()


@dataclasses.dataclass(frozen=True)
class RecordingState:
    """What ``/healthz`` and ``/metrics`` show of one recording."""

    stream: str
    sink: str
    folder: str
    recording: bool
    reason: str | None
    errors: dict[str, int]
    skipped: int
    not_recorded: int

    def summary(self) -> str:
        """One line for the end of a run (``print_summary``)."""
        failures = ", ".join(f"{count} {reason}" for reason, count in sorted(self.errors.items()))
        now = "recording at the end" if self.recording else f"stopped at the end ({self.reason})"
        return (f"{self.stream} {self.sink}: {sum(self.errors.values())} failed write(s) "
                f"({failures}), {self.not_recorded} frame(s) not recorded, {now}")


class Recordings:
    """Every live recording of a run (``add``), read by the live view's health and metrics."""

    def __init__(self) -> None:
        self._all: list[Recording] = []
        self._lock = threading.Lock()

    def add(self, stream: str, sink: str, folder: Path, **options: Any) -> Recording:
        recording = Recording(stream, sink, folder, **options)
        with self._lock:
            self._all.append(recording)
        return recording

    def states(self) -> list[RecordingState]:
        with self._lock:
            recordings = list(self._all)
        return [RecordingState(r.stream, r.sink, str(r.folder), r.recording, r.reason,
                               dict(r.errors), r.skipped, r.not_recorded) for r in recordings]

    def free_bytes(self) -> dict[str, int]:
        """Free bytes of each folder recorded into (``df``'s Avail), asked now."""
        with self._lock:
            folders = sorted({str(r.folder) for r in self._all})
        return {folder: free_bytes(folder) for folder in folders}
