"""LiveState's health by an injected clock, and the Prometheus text it renders."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.vision.serve import metrics
from edgefuse.vision.serve.preview import Previews, factor_for
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


def test_metrics_account_for_every_event_of_each_publisher():
    optional("prometheus_client")
    state = LiveState(["gate"])
    state.event_delivery = lambda: {"mqtt": {"accepted": 13, "delivered": 7, "queued": 3,
                                             "dropped": {
        "journal-full": 2, "journal-torn": 1}}}
    text = metrics.render(metrics.registry_for(state)).decode()
    assert 'edgefuse_events_emitted_total{publisher="mqtt"} 13.0' in text
    assert 'edgefuse_events_delivered_total{publisher="mqtt"} 7.0' in text
    assert 'edgefuse_events_queued{publisher="mqtt"} 3.0' in text
    assert 'edgefuse_events_dropped_total{publisher="mqtt",reason="journal-full"} 2.0' in text
    assert 'edgefuse_events_dropped_total{publisher="mqtt",reason="journal-torn"} 1.0' in text


def test_a_stream_goes_through_its_states_and_the_health_follows():
    clock = _Clock()
    state = LiveState(["cam"], stall_s=5.0, clock=clock)
    seen = [state.health().states["cam"]]
    state.frame("cam", b"jpeg")
    seen.append(state.health().states["cam"])
    state.source_state("cam", "down")
    seen.append(state.health().states["cam"])
    state.source_state("cam", "up")
    state.frame("cam", b"jpeg")
    seen.append(state.health().states["cam"])
    clock.now += 6.0
    seen.append(state.health().states["cam"])
    state.end("cam")
    seen.append(state.health().states["cam"])
    assert seen == ["starting", "live", "reconnecting", "live", "stalled", "ended"]
    assert state.healthy() and state.snapshot()["cam"]["state"] == "ended"
    with pytest.raises(ValueError, match="unknown source state"):
        state.source_state("cam", "sideways")


def test_an_ended_stream_is_down_in_metrics_and_loses_its_rate_but_keeps_its_counts():
    optional("prometheus_client")
    state = LiveState(["file", "camera"], stall_s=3600)
    for name in ("file", "camera"):
        state.frame(name, b"x", stats={"fps": 16.0, "latency_p50_ms": 30.0},
                    counts={"lines": {"door": {"in": {"person": 2}, "out": {}}}})
    state.end("file")
    text = metrics.render(metrics.registry_for(state)).decode()
    assert 'edgefuse_stream_up{stream="file"} 0.0' in text
    assert 'edgefuse_stream_up{stream="camera"} 1.0' in text
    assert 'edgefuse_fps{stream="file"}' not in text and 'stream="file"} 30.0' not in text
    assert 'edgefuse_fps{stream="camera"} 16.0' in text
    assert 'edgefuse_stream_state{state="ended",stream="file"} 1.0' in text
    assert 'edgefuse_stream_state{state="live",stream="file"} 0.0' in text
    assert ('edgefuse_line_crossings_total{class="person",direction="in",line="door",'
            'stream="file"} 2.0') in text


def test_events_are_kept_numbered_and_bounded():
    state = LiveState(["cam"], events_kept=3)
    assert state.events() == (0, [])
    emitted = [{"type": "line_crossed", "n": n} for n in range(5)]
    for event in emitted:
        state.publish(event)
    newest, kept = state.events()
    assert newest == 5 and [e["seq"] for e in kept] == [3, 4, 5]
    assert kept[0] == {**emitted[2], "seq": 3} and "seq" not in emitted[2]
    assert state.events(after=4) == (5, [{**emitted[4], "seq": 5}])
    assert [e["seq"] for e in state.events(limit=1)[1]] == [5]


def test_previews_are_reduced_to_the_tile_width_once_per_frame():
    cv2 = optional("cv2")
    assert [factor_for(1280, wanted) for wanted in (160, 321, 640, 1280, 0)] == [8, 4, 2, 1, 1]
    assert factor_for(None, 320) == 1
    ok, jpeg = cv2.imencode(".jpg", np.full((720, 1280, 3), 90, np.uint8))
    previews = Previews()
    small = previews.get("cam", 1, jpeg.tobytes(), 1280, 320)
    assert cv2.imdecode(np.frombuffer(small, np.uint8), cv2.IMREAD_COLOR).shape == (180, 320, 3)
    assert previews.get("cam", 1, b"not used: cached", 1280, 320) is small
    assert previews.get("cam", 1, jpeg.tobytes(), 1280, 1280) == jpeg.tobytes()
    assert previews.get("cam", 2, b"not a jpeg", 1280, 320) == b"not a jpeg"
