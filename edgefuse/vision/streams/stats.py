"""Pipeline statistics: per-stage latency p50/p95 and FPS over a sliding window, totals, counters.

Why both a window and totals: the line printed every few seconds must show what the pipeline
does now (a camera that drops frames, a thermal slowdown), the summary what it did over the run
(OpenVINO's PerformanceMetrics: a 1 s window plus totals, per stage; DeepStream prints FPS every
5 s). The window keeps (time, value) pairs of the last ``window_s`` seconds (at most
``WINDOW_SAMPLES``); totals keep every sample up to ``RESERVOIR`` per stage and a uniform random
sample beyond (reservoir sampling), so an hours-long live run stays in constant memory and a
normal run has exact percentiles. All methods are thread-safe: every stage thread records into
one object.

Counters name events, not stages: ``dropped`` (stale live frames replaced by newer ones),
``skipped`` (frames left out on purpose by ``stride``), ``reconnects``, ``unreadable`` (images
that failed to decode), ``decode_errors`` (a camera's frames that were no decodable picture, a
video file's frames lost to truncation), ``sink_closed``.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

RESERVOIR = 65536
WINDOW_SAMPLES = 1024  # per stage: a 2 s window at up to 512 fps
LATENCY = "latency"  # end-to-end: capture to sink done


@dataclasses.dataclass(frozen=True)
class StageLatency:
    """Milliseconds: median, 95th percentile, mean; and how many samples they are over."""

    p50_ms: float
    p95_ms: float
    mean_ms: float
    count: int


@dataclasses.dataclass(frozen=True)
class StatsSnapshot:
    """What the pipeline did, over the window (``fps``, ``stages``) or the run (``totals``)."""

    elapsed_s: float
    frames: int
    fps: float
    mean_fps: float
    stages: dict[str, StageLatency]
    totals: dict[str, StageLatency]
    counters: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for the periodic report."""
        stages = " | ".join(f"{name} {s.p50_ms:.1f}/{s.p95_ms:.1f}"
                            for name, s in self.stages.items() if name != LATENCY)
        latency = self.stages.get(LATENCY)
        text = f"{self.frames} frames  {self.fps:.1f} fps  ms p50/p95: {stages}"
        if latency is not None:
            text += f" | latency {latency.p50_ms:.1f}/{latency.p95_ms:.1f}"
        events = "  ".join(f"{k} {v}" for k, v in self.counters.items() if v)
        return text + (f"  [{events}]" if events else "")

    def summary(self) -> str:
        """The multi-line end-of-run summary."""
        lines = [f"{self.frames} frames in {self.elapsed_s:.1f} s: {self.mean_fps:.1f} fps"]
        for name, s in self.totals.items():
            lines.append(f"  {name:<12} p50 {s.p50_ms:8.2f} ms   p95 {s.p95_ms:8.2f} ms   "
                         f"mean {s.mean_ms:8.2f} ms")
        events = ", ".join(f"{k} {v}" for k, v in self.counters.items() if v)
        if events:
            lines.append(f"  events: {events}")
        return "\n".join(lines)


class _Samples:
    """Every sample up to RESERVOIR, then a uniform sample of them (Vitter's algorithm R)."""

    def __init__(self, rng: np.random.Generator) -> None:
        # np.full writes every page now: np.zeros would commit them one by one as samples
        # arrive, which a memory soak reads as a leak.
        self.values = np.full(RESERVOIR, np.nan, dtype=np.float64)
        self.count = 0
        self.total = 0.0
        self._rng = rng

    def add(self, value: float) -> None:
        if self.count < RESERVOIR:
            self.values[self.count] = value
        else:
            slot = int(self._rng.integers(0, self.count + 1))
            if slot < RESERVOIR:
                self.values[slot] = value
        self.count += 1
        self.total += value

    def latency(self) -> StageLatency | None:
        if not self.count:
            return None
        kept = self.values[:min(self.count, RESERVOIR)]
        p50, p95 = np.percentile(kept, [50, 95])
        return StageLatency(p50 * 1e3, p95 * 1e3, self.total / self.count * 1e3, self.count)


class PipelineStats:
    """Thread-safe recorder for stage timings (seconds), finished frames and event counters."""

    COUNTERS = ("dropped", "skipped", "reconnects", "unreadable", "decode_errors", "sink_closed")

    def __init__(self, stages: Iterable[str], *, window_s: float = 2.0,
                 clock=time.perf_counter) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        rng = np.random.default_rng(0)
        self._names = (*stages, LATENCY)
        self._totals = {name: _Samples(rng) for name in self._names}
        self._recent = {name: collections.deque(maxlen=WINDOW_SAMPLES) for name in self._names}
        self._done: collections.deque[float] = collections.deque(maxlen=WINDOW_SAMPLES)
        self._counters = dict.fromkeys(self.COUNTERS, 0)
        self._frames = 0
        self._start = clock()
        self._end: float | None = None

    def restart(self) -> None:
        """Start the clock now (after warm-up or opening the source)."""
        with self._lock:
            self._start = self._clock()

    def record(self, stage: str, seconds: float) -> None:
        now = self._clock()
        with self._lock:
            self._totals[stage].add(seconds)
            self._recent[stage].append((now, seconds))

    def frame_done(self, latency_s: float | None = None) -> None:
        now = self._clock()
        with self._lock:
            self._frames += 1
            self._done.append(now)
            if latency_s is not None:
                self._totals[LATENCY].add(latency_s)
                self._recent[LATENCY].append((now, latency_s))

    def count(self, event: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[event] = self._counters.get(event, 0) + amount

    @property
    def frames_done(self) -> int:
        """Frames through the whole pipeline so far (cheap: for health checks)."""
        with self._lock:
            return self._frames

    def recent_p50_ms(self, stages: Iterable[str]) -> dict[str, tuple[float, int]]:
        """(p50 in ms, samples) of each of ``stages`` over the window: cheap beside
        ``snapshot``, which also takes the run's percentiles."""
        now = self._clock()
        with self._lock:
            since = (self._end if self._end is not None else now) - self.window_s
            values = {name: [v for t, v in self._recent[name] if t >= since] for name in stages}
        return {name: (float(np.median(v)) * 1e3, len(v)) for name, v in values.items() if v}

    def counter(self, event: str) -> int:
        with self._lock:
            return self._counters.get(event, 0)

    def finish(self) -> None:
        """Freeze the run's elapsed time (the summary's FPS ignores the time after the end)."""
        with self._lock:
            self._end = self._clock()

    def snapshot(self) -> StatsSnapshot:
        now = self._clock()
        with self._lock:
            end = self._end if self._end is not None else now
            elapsed = max(end - self._start, 1e-9)
            since = end - self.window_s
            recent_done = [t for t in self._done if t >= since]
            span = min(self.window_s, elapsed)
            stages = {}
            for name in self._names:
                values = [v for t, v in self._recent[name] if t >= since]
                if values:
                    p50, p95 = np.percentile(values, [50, 95])
                    stages[name] = StageLatency(p50 * 1e3, p95 * 1e3,
                                                float(np.mean(values)) * 1e3, len(values))
            totals = {name: s for name in self._names
                      if (s := self._totals[name].latency()) is not None}
            return StatsSnapshot(
                elapsed_s=elapsed, frames=self._frames, fps=len(recent_done) / span,
                mean_fps=self._frames / elapsed, stages=stages, totals=totals,
                counters=dict(self._counters),
            )
