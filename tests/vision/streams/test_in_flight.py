"""The live frames-in-flight policy: the limit from stage times, retuned from the stats window,
and a fixed ``in_flight`` left alone. Stage times are given, never measured (no timing here)."""

from __future__ import annotations

import pytest

from edgefuse.vision.streams import in_flight as module
from edgefuse.vision.streams.in_flight import InFlight, frames_in_flight
from edgefuse.vision.streams.stats import PipelineStats

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("stage_ms", "expected"), [
    # inference the bottleneck, light stages around it: L/B = 1.35 -> one frame
    ({"preprocess": 2, "infer": 20, "postprocess": 4, "sink": 1}, 1),
    # L/B = 1.5 exactly: the second frame buys half a slot of throughput -> admitted
    ({"preprocess": 4, "infer": 20, "postprocess": 4, "sink": 2}, 2),
    ({"preprocess": 4, "infer": 20, "postprocess": 4, "sink": 1.9}, 1),
    # four balanced stages: each frame in flight keeps one more stage busy
    ({"preprocess": 10, "infer": 10, "postprocess": 10, "sink": 10}, 4),
    ({"preprocess": 9, "infer": 10, "postprocess": 9, "sink": 9}, 4),
    ({"preprocess": 8, "infer": 20, "postprocess": 8, "sink": 8}, 2),
    ({}, 1),
    ({"capture": 50, "infer": 10}, 1),  # a live capture only takes the slot: not on the path
])
def test_the_limit_is_the_path_over_the_slowest_stage_rounded(stage_ms, expected):
    assert frames_in_flight(stage_ms) == expected


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(stats: PipelineStats, clock: Clock, stage_ms: dict[str, float], count: int) -> None:
    for _ in range(count):
        clock.now += 0.01
        for name, ms in stage_ms.items():
            stats.record(name, ms / 1e3)


def test_the_default_starts_at_one_and_follows_the_measured_stages():
    clock = Clock()
    stats = PipelineStats(("capture", *module.PATH_STAGES), window_s=10.0, clock=clock)
    limiter = InFlight(None, stats, clock=clock)
    assert limiter.limit == 1 and limiter.acquire(0) and not limiter.acquire(0)
    limiter.release()
    balanced = {"preprocess": 10, "infer": 10, "postprocess": 10, "sink": 10}
    record(stats, clock, balanced, module.MIN_SAMPLES - 1)  # too few samples: no change
    clock.now += module.RETUNE_S
    assert limiter.acquire(0) and limiter.limit == 1
    limiter.release()
    record(stats, clock, balanced, 1)
    clock.now += module.RETUNE_S
    assert limiter.acquire(0) and limiter.limit == 4
    assert limiter.acquire(0) and limiter.acquire(0) and limiter.acquire(0)
    assert not limiter.acquire(0)  # four in flight: the fifth frame waits
    for _ in range(4):
        limiter.release()
    clock.now += 11.0  # the window forgets the balanced stages; inference slows down
    record(stats, clock, {"preprocess": 2, "infer": 40, "postprocess": 2, "sink": 2},
           module.MIN_SAMPLES)
    clock.now += module.RETUNE_S
    assert limiter.acquire(0) and limiter.limit == 1


def test_a_fixed_in_flight_is_never_retuned():
    clock = Clock()
    stats = PipelineStats(("capture", *module.PATH_STAGES), clock=clock)
    limiter = InFlight(3, stats, clock=clock)
    record(stats, clock, {"preprocess": 1, "infer": 40, "postprocess": 1, "sink": 1}, 50)
    clock.now += 10
    assert [limiter.acquire(0) for _ in range(4)] == [True, True, True, False]
    assert limiter.limit == 3
