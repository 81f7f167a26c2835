"""A live HTTP MJPEG stream served on 127.0.0.1 faster than the pipeline reads it: stale frames
are dropped and counted, latency stays bounded, and a server killed mid-run is reconnected.

OpenCV (its FFmpeg) opens ``http://...`` MJPEG streams (multipart/x-mixed-replace) directly, so
the source under test is the same one an IP camera gets. Every wait has a deadline; the pipeline
runs on a thread that must end within it.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edgefuse.testing.mjpeg import MjpegServer, decode_number
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import Reconnect, open_source
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")

class SlowTask:
    """Decodes the frame number; inference takes 20 ms (50 fps against a 250 fps stream)."""

    def preprocess(self, image):
        return {}, decode_number(image)

    def infer(self, feeds):
        time.sleep(0.02)
        return {}

    def postprocess(self, outputs, number):
        return number

    def annotate(self, image, result):
        return image

    def describe(self, result):
        return {}


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_stale_frames_are_dropped_latency_is_bounded_and_a_dropped_stream_reconnects(caplog):
    server = MjpegServer()
    server.start()
    seen: list[tuple[int, float]] = []  # (frame number, seconds from sending to the sink)
    restarted_at: list[int] = []

    def record(result):
        seen.append((result.result, time.perf_counter() - server.sent[result.result]))
        return not (restarted_at and len(seen) >= restarted_at[0] + 20)

    try:
        source = open_source(server.url, reconnect=Reconnect(attempts=30, backoff_s=0.05,
                                                             max_backoff_s=0.2, timeout_s=2.0))
        pipeline = Pipeline(source, SlowTask(), [CallbackSink(record)], in_flight=2,
                            report_every=None)
        outcome: dict = {}
        runner = threading.Thread(target=lambda: outcome.update(summary=pipeline.run()),
                                  daemon=True)
        runner.start()
        assert wait_until(lambda: len(seen) >= 30, 10), "no frames reached the sink"
        server.stop()  # kill the stream mid-run ...
        time.sleep(0.4)
        server.start()  # ... and bring it back on the same port
        restarted_at.append(len(seen))
        runner.join(timeout=15)
        if runner.is_alive():
            pipeline.stop()
            runner.join(timeout=5)
        assert not runner.is_alive(), "the pipeline did not stop"
    finally:
        server.stop()
    summary = outcome["summary"]
    assert summary.reason == "sink_closed"
    assert summary.stats.counters["reconnects"] >= 1
    assert "stream dropped; reconnecting" in caplog.text and "reconnected" in caplog.text
    numbers = [number for number, _ in seen]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    # The stream ran ~5x faster than the pipeline: most frames were replaced before being read.
    assert summary.stats.counters["dropped"] > len(seen)
    latencies = np.array([latency for _, latency in seen])
    before = latencies[:restarted_at[0]]
    after = latencies[restarted_at[0] + 5:]
    # Bounded: a couple of 20 ms inference slots, not a backlog that grows over the run.
    assert np.median(before) < 0.25 and np.median(after) < 0.25
    assert np.median(before[-10:]) < np.median(before[:10]) + 0.1
