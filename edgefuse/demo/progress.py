"""The demo's step display: a numbered title, a live elapsed-time ticker, the outcome line.

Why a ticker: the long steps (the export, the FP16 search, the apps over the clip) are silent for
seconds; on a terminal a counter that moves says the program is alive and how long a step takes.
Off a terminal (CI logs, pipes) the ticker is left out: carriage returns make logs unreadable,
so only the title and the outcome line are written.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

TICK_S = 0.2


class Steps:
    """Numbered steps out of ``total``; ``with steps.step("title") as step: step.note("...")``."""

    def __init__(self, total: int, *, stream: TextIO | None = None,
                 live: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live

    def step(self, title: str) -> Step:
        self.done += 1
        return Step(f"[{self.done}/{self.total}] {title}", self.stream, self.live)


class Step:
    """One step: prints its title, ticks while it runs (live only), then ``done in X s``."""

    def __init__(self, title: str, stream: TextIO, live: bool) -> None:
        self.title = title
        self.stream = stream
        self.live = live
        self._status = ""
        self._start = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> Step:
        self._start = time.perf_counter()
        self._write(self.title + "\n")
        if self.live:
            self._ticker = threading.Thread(target=self._tick, name="demo-ticker", daemon=True)
            self._ticker.start()
        return self

    def note(self, status: str) -> None:
        """What the step is doing now (shown on the ticker line; off a terminal, ignored)."""
        self._status = status

    def say(self, line: str) -> None:
        """A result line of the step, printed under its title."""
        self._write(f"{self._clear()}      {line}\n")

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        elapsed = time.perf_counter() - self._start
        outcome = "done" if kind is None else "failed"
        self._write(f"{self._clear()}      {outcome} in {elapsed:.1f} s\n")

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            elapsed = time.perf_counter() - self._start
            status = f"  {self._status}" if self._status else ""
            self._write(f"\r      {elapsed:5.1f} s{status}\033[K")

    def _clear(self) -> str:
        return "\r\033[K" if self.live else ""

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
