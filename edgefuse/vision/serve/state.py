"""What the web view, the metrics and the health check read: each stream's latest annotated
frame (as JPEG), its counts and its stats, updated by the pipeline's ``LiveSink``.

Why one state object read at request time: the page, ``/metrics`` and ``/healthz`` must agree
with each other and with the JSON Lines; computing each from the same snapshot (and counting
nothing twice) is how they do. Health: a stream is stalled when it delivered no frame for
``stall_s`` seconds (by an injectable clock) or reported itself down; a stream that ended (a file
read to its end, ``max_frames`` reached) is not stalled, it is done; the process is healthy while
no stream is stalled, which is what systemd's watchdog and a fleet rollout's health check ask.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class StreamView:
    name: str
    jpeg: bytes | None = None
    version: int = 0  # increases with every frame, for the MJPEG streams to wait on
    frames: int = 0
    last_frame_at: float | None = None
    up: bool = True
    ended: bool = False
    counts: dict[str, Any] = dataclasses.field(default_factory=dict)
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)


class LiveState:
    def __init__(self, streams: list[str], *, stall_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if len(set(streams)) != len(streams):
            raise ValueError(f"stream names repeat: {streams}")
        self._views = {name: StreamView(name) for name in streams}
        self._changed = threading.Condition()
        self.stall_s, self._clock = stall_s, clock
        self._started = clock()

    @property
    def streams(self) -> list[str]:
        return list(self._views)

    def frame(self, stream: str, jpeg: bytes | None, *, counts: dict[str, Any] | None = None,
              stats: dict[str, Any] | None = None) -> None:
        with self._changed:
            view = self._views[stream]
            if jpeg is not None:
                view.jpeg = jpeg
            view.version += 1
            view.frames += 1
            view.last_frame_at = self._clock()
            view.up = True
            if counts is not None:
                view.counts = counts
            if stats is not None:
                view.stats = stats
            self._changed.notify_all()

    def set_up(self, stream: str, up: bool) -> None:
        with self._changed:
            self._views[stream].up = up
            self._changed.notify_all()

    def end(self, stream: str) -> None:
        """The stream delivered its last frame (its pipeline closed its sinks)."""
        with self._changed:
            self._views[stream].ended = True
            self._changed.notify_all()

    def latest(self, stream: str) -> tuple[int, bytes | None]:
        with self._changed:
            view = self._views[stream]
            return view.version, view.jpeg

    def wait_newer(self, stream: str, version: int, timeout: float) -> tuple[int, bytes | None]:
        """The latest frame once its version passes ``version`` (or after ``timeout``)."""
        with self._changed:
            self._changed.wait_for(lambda: self._views[stream].version > version, timeout)
            view = self._views[stream]
            return view.version, view.jpeg

    def stalled(self) -> list[str]:
        now = self._clock()
        with self._changed:
            return [name for name, view in self._views.items()
                    if not view.up or (not view.ended and now - (view.last_frame_at
                                                                 or self._started) > self.stall_s)]

    def snapshot(self) -> dict[str, Any]:
        """JSON-able: per stream, frames, up, seconds since the last frame, counts, stats."""
        now = self._clock()
        stalled = set(self.stalled())
        with self._changed:
            return {name: {"frames": view.frames, "up": view.up, "ended": view.ended,
                           "stalled": name in stalled,
                           "since_last_frame_s": None if view.last_frame_at is None
                           else round(now - view.last_frame_at, 3),
                           "counts": view.counts, "stats": view.stats}
                    for name, view in self._views.items()}
