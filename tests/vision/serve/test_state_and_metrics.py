"""LiveState's health by an injected clock, and the Prometheus text it renders."""

from __future__ import annotations

import pytest

from edgefuse.vision.serve import metrics
from edgefuse.vision.serve.state import LiveState
from tests.needs import optional

pytestmark = pytest.mark.unit


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_stream_without_frames_for_stall_s_is_stalled():
    clock = _Clock()
    state = LiveState(["gate", "yard"], stall_s=5.0, clock=clock)
    clock.now += 4.0
    state.frame("gate", b"jpeg")
    assert state.stalled() == []
    clock.now += 2.0  # yard: 6 s since the start with no frame; gate: 2 s since its frame
    assert state.stalled() == ["yard"]
    state.frame("yard", b"jpeg")
    state.source_state("gate", "down")
    assert state.stalled() == ["gate"]
    assert state.health().states == {"gate": "reconnecting", "yard": "live"}


def test_a_stream_that_ended_is_done_not_stalled_but_a_lost_one_stays_unhealthy():
    clock = _Clock()
    state = LiveState(["file", "camera"], stall_s=5.0, clock=clock)
    state.frame("file", b"jpeg")
    state.frame("camera", b"jpeg")
    state.end("file")  # read to its end: its LiveSink closed
    state.source_state("camera", "down")
    state.source_state("camera", "lost")
    state.end("camera")  # lost: its pipeline ended too, after saying it was down
    clock.now += 60.0
    assert state.stalled() == ["camera"]
    assert state.snapshot()["file"]["ended"] and not state.snapshot()["file"]["stalled"]
    assert state.health().states == {"file": "ended", "camera": "lost"}


def test_repeated_stream_names_are_refused():
    with pytest.raises(ValueError, match="stream names repeat"):
        LiveState(["a", "a"])


def test_metrics_render_counts_stats_and_health():
    optional("prometheus_client")
    clock = _Clock()
    state = LiveState(["gate"], stall_s=5.0, clock=clock)
    state.frame("gate", b"x", stats={"fps": 12.5, "latency_p50_ms": 40.0, "dropped": 3},
                counts={"lines": {"door": {"in": {"person": 2}, "out": {}}},
                        "zones": {"bay": {"occupancy": {"car": 1}, "entries": {"car": 4}}}})
    text = metrics.render(metrics.registry_for(state)).decode()
    assert 'edgefuse_frames_total{stream="gate"} 1.0' in text
    assert 'edgefuse_fps{stream="gate"} 12.5' in text
    assert 'edgefuse_latency_ms{quantile="0.5",stream="gate"} 40.0' in text
    assert 'edgefuse_dropped_frames_total{stream="gate"} 3.0' in text
    assert ('edgefuse_line_crossings_total{class="person",direction="in",line="door",'
            'stream="gate"} 2.0') in text
    assert 'edgefuse_zone_occupancy{class="car",stream="gate",zone="bay"} 1.0' in text
    assert 'edgefuse_stream_up{stream="gate"} 1.0' in text
    clock.now += 6.0
    assert 'edgefuse_stream_up{stream="gate"} 0.0' in metrics.render(
        metrics.registry_for(state)).decode()
