"""How many frames a live source may have in the pipeline at once, fixed or from measured stages.

Why a limit at all: a live source is read ahead only while fewer than ``limit`` frames are in the
stages; every frame beyond that waits in the source's one-frame slot, where newer frames replace
it. More frames in flight keep more stages busy (throughput) but each waits behind the others
(latency); on a camera both matter, and a camera app must show the present.

The default policy (``in_flight`` unset): with L the sum of the stages' p50 times (preprocess,
infer, postprocess, sink: the path one frame takes; a live capture only takes the slot) and B
the slowest stage's, n frames give a throughput of about min(n / L, 1 / B) and a latency of about
max(L, n * B) (Little's law: once the slowest stage is saturated, every extra frame only waits).
The limit is L / B rounded to the nearest integer, at least 1: an extra frame is admitted only
when it buys at least half a slowest-stage slot of throughput, so the latency never exceeds the
one-frame latency L by more than B / 2, and the throughput stays within B / (2 L) of the
slowest stage's. With inference the bottleneck and light pre/post-processing (L / B < 1.5) that
is one frame: the lowest latency at the throughput of any larger setting. The limit starts at 1
and is re-derived every ``RETUNE_S`` from the stats window once each stage has
``MIN_SAMPLES`` samples, so it follows a model that slows down (thermal throttling) or a scene
that makes post-processing heavier. ``in_flight: N`` fixes it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping

from edgefuse.vision.streams.stats import PipelineStats

log = logging.getLogger(__name__)

PATH_STAGES = ("preprocess", "infer", "postprocess", "sink")
RETUNE_S = 1.0
MIN_SAMPLES = 8
MAX_AUTO = 4


def frames_in_flight(stage_ms: Mapping[str, float]) -> int:
    """The default limit for these per-stage p50 times (ms): round(L / B), at least 1."""
    times = [stage_ms[name] for name in PATH_STAGES if stage_ms.get(name, 0.0) > 0.0]
    if not times:
        return 1
    return max(1, min(MAX_AUTO, math.floor(sum(times) / max(times) + 0.5)))


class InFlight:
    """Admits a live frame while fewer than ``limit`` are in flight; ``fixed=None`` tunes it."""

    def __init__(self, fixed: int | None, stats: PipelineStats, *,
                 clock=time.perf_counter) -> None:
        self.auto = fixed is None
        self.limit = 1 if fixed is None else max(int(fixed), 1)
        self._stats = stats
        self._clock = clock
        self._count = 0
        self._changed = threading.Condition()
        self._next_tune = clock() + RETUNE_S

    def acquire(self, timeout: float) -> bool:
        """Take a slot for one frame; False when none came free within ``timeout``."""
        if self.auto:
            self._retune()
        with self._changed:
            if not self._changed.wait_for(lambda: self._count < self.limit, timeout):
                return False
            self._count += 1
            return True

    def release(self) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify_all()

    def _retune(self) -> None:
        now = self._clock()
        if now < self._next_tune:
            return
        self._next_tune = now + RETUNE_S
        window = self._stats.recent_p50_ms(PATH_STAGES)
        if any(name not in window or window[name][1] < MIN_SAMPLES for name in PATH_STAGES):
            return
        stage_ms = {name: window[name][0] for name in PATH_STAGES}
        limit = frames_in_flight(stage_ms)
        if limit != self.limit:
            log.info("frames in flight: %d -> %d (stage p50 ms: %s)", self.limit, limit,
                     ", ".join(f"{name} {ms:.1f}" for name, ms in stage_ms.items()))
            with self._changed:
                self.limit = limit
                self._changed.notify_all()
