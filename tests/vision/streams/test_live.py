"""A live HTTP MJPEG stream served on 127.0.0.1 faster than the pipeline reads it: stale frames
are dropped and counted, latency stays bounded, and a server killed mid-run is reconnected.

OpenCV (its FFmpeg) opens ``http://...`` MJPEG streams (multipart/x-mixed-replace) directly, so
the source under test is the same one an IP camera gets. Every wait has a deadline; the pipeline
runs on a thread that must end within it.
"""

from __future__ import annotations

import http.server
import socketserver
import threading
import time

import numpy as np
import pytest

from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import Reconnect, open_source
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")

DIGITS = 3  # frame numbers up to 16**3, one 16 x 16 grey block per hex digit (JPEG-proof)


def encode_number(number: int) -> np.ndarray:
    image = np.zeros((16, 16 * DIGITS, 3), np.uint8)
    for position in range(DIGITS):
        digit = (number >> (4 * (DIGITS - 1 - position))) & 0xF
        image[:, 16 * position:16 * (position + 1)] = digit * 16 + 8
    return image


def decode_number(image: np.ndarray) -> int:
    number = 0
    for position in range(DIGITS):
        value = float(image[4:12, 16 * position + 4:16 * position + 12].mean())
        number = number * 16 + int(round((value - 8) / 16))
    return number


class MjpegServer:
    """Streams numbered JPEG frames at ``fps``; records when each number was sent."""

    def __init__(self, fps: float = 250.0) -> None:
        self.fps = fps
        self.sent: dict[int, float] = {}
        self.next_number = 0
        self.port = 0
        self.running = threading.Event()
        self._server: socketserver.TCPServer | None = None

    def start(self) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                try:
                    while owner.running.is_set():
                        number = owner.next_number
                        owner.next_number += 1
                        data = cv2.imencode(".jpg", encode_number(number),
                                            [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
                        owner.sent[number] = time.perf_counter()
                        self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\n"
                                         b"Content-Length: %d\r\n\r\n" % len(data) + data + b"\r\n")
                        time.sleep(1 / owner.fps)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self.running.set()
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self) -> None:
        self.running.clear()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/stream.mjpg"


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
