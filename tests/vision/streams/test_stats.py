"""Pipeline statistics: window and totals, counters, bounded memory; with a fake clock."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.vision.streams import stats as stats_module
from edgefuse.vision.streams.stats import PipelineStats

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_window_and_totals():
    clock = Clock()
    stats = PipelineStats(["infer"], window_s=1.0, clock=clock)
    stats.restart()
    for i in range(20):  # 10 frames per second for 2 s; infer takes 10 ms, then 30 ms
        clock.now += 0.1
        stats.record("infer", 0.010 if i < 10 else 0.030)
        stats.frame_done(0.05)
    snapshot = stats.snapshot()
    assert snapshot.frames == 20
    assert snapshot.mean_fps == pytest.approx(10.0)
    assert snapshot.fps == pytest.approx(10.0, abs=1.01)
    assert snapshot.stages["infer"].p50_ms == pytest.approx(30.0)  # the window: last second
    assert snapshot.totals["infer"].p50_ms == pytest.approx(20.0)  # the run: half and half
    assert snapshot.totals["infer"].p95_ms == pytest.approx(30.0)
    assert snapshot.totals["latency"].mean_ms == pytest.approx(50.0)
    assert "20 frames" in snapshot.line() and "infer 30.0/30.0" in snapshot.line()
    assert "10.0 fps" in snapshot.summary()


def test_counters_and_the_end_of_the_run():
    clock = Clock()
    stats = PipelineStats(["infer"], clock=clock)
    stats.count("dropped", 3)
    stats.count("reconnects")
    clock.now += 2
    stats.frame_done()
    stats.finish()
    clock.now += 100  # after the end: does not dilute the mean
    snapshot = stats.snapshot()
    assert snapshot.counters["dropped"] == 3 and snapshot.counters["reconnects"] == 1
    assert snapshot.mean_fps == pytest.approx(0.5)
    assert "dropped 3" in snapshot.line() and "reconnects 1" in snapshot.summary()


def test_totals_stay_in_constant_memory(monkeypatch):
    monkeypatch.setattr(stats_module, "RESERVOIR", 100)
    stats = PipelineStats(["infer"])
    values = np.random.default_rng(0).uniform(0, 0.02, 5000)
    for value in values:
        stats.record("infer", float(value))
    total = stats.snapshot().totals["infer"]
    assert total.count == 5000
    assert total.mean_ms == pytest.approx(values.mean() * 1e3)
    assert total.p50_ms == pytest.approx(10.0, abs=2.5)  # a uniform sample of 100
    assert stats._totals["infer"].values.shape == (100,)


def test_p95_is_the_95th_percentile_not_the_90th():
    """1, 2, ..., 100 ms: linear interpolation puts p50 at 50.5 ms and p95 at 95.05 ms (p90 would
    be 90.1, p99 99.01), in the window and over the run."""
    clock = Clock()
    stats = PipelineStats(["infer"], window_s=1000.0, clock=clock)
    for ms in np.random.default_rng(0).permutation(np.arange(1, 101)):
        clock.now += 0.01
        stats.record("infer", ms / 1e3)
    snapshot = stats.snapshot()
    for latency in (snapshot.stages["infer"], snapshot.totals["infer"]):
        assert latency.p50_ms == pytest.approx(50.5)
        assert latency.p95_ms == pytest.approx(95.05)
        assert latency.mean_ms == pytest.approx(50.5)
    assert f"infer 50.5/{95.05:.1f}" in snapshot.line()
