"""The per-model progress display of ``edgefuse build`` on stderr.

Why lines and not a redrawn screen: the build runs in CI logs as often as in a terminal, and
models build in parallel processes; one line per (model, stage) with the outcome and the time
reads the same in both and survives interleaving. Workers send events through a queue; one
thread in the parent prints them, so lines never tear.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TextIO

Event = tuple[str, str, str, float]


class ProgressPrinter:
    """Prints ``[model] 2/5 stage  built|cached  1.2 s`` lines (``models``: each model's number
    of stages); ``enabled=False`` prints nothing."""

    def __init__(self, models: Mapping[str, int], *, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.width = max((len(m) for m in models), default=0)
        self.stages = dict(models)
        self.done: dict[str, int] = dict.fromkeys(models, 0)
        self.lock = threading.Lock()

    def __call__(self, model: str, stage: str, status: str, seconds: float) -> None:
        with self.lock:
            self.done[model] = self.done.get(model, 0) + 1
            if self.enabled:
                step = f"{self.done[model]}/{self.stages[model]}"
                print(f"[{model:<{self.width}}] {step} {stage:<8} {status:<6} {seconds:6.1f} s",
                      file=self.stream, flush=True)

    def line(self, text: str) -> None:
        if self.enabled:
            with self.lock:
                print(text, file=self.stream, flush=True)


class QueueDrain:
    """A thread that hands every event put on ``events`` to ``sink`` until stopped."""

    def __init__(self, events: Any, sink: Callable[..., None]) -> None:
        self.events = events
        self.sink = sink
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            try:
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError):
                return
            if event is None:
                return
            self.sink(*event)

    def __enter__(self) -> QueueDrain:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.put(None)
        self.thread.join(timeout=5)
