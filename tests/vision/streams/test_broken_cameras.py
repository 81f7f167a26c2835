"""Broken cameras (issue 31 §4): an MJPEG server on 127.0.0.1 sends corrupt JPEGs, garbage bytes
and a resolution change, then drops the connection: every bad part is skipped and counted, the
good frames all arrive (or are counted as stale), and only the broken transport reconnects.

The server (``edgefuse.testing.mjpeg.MjpegServer``) plays a script per connection; each frame's
brightness is its number, so the test knows which frames came. The run ends when the script's
last frame reaches the sink.
"""

from __future__ import annotations

import http.server
import threading

import numpy as np
import pytest

from edgefuse._cv import cv2 as opencv
from edgefuse.errors import InputError
from edgefuse.testing.mjpeg import MjpegServer, bare_part, part
from edgefuse.vision.streams.mjpeg_http import decode_jpeg
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import LiveSource, Reconnect, open_source
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")
LAST = 250  # the brightness of the script's last frame
PACE_FPS = 100  # the scripted camera's chunks per second


def jpeg(level: int, size: tuple[int, int] = (48, 64)) -> bytes:
    """A flat frame of brightness ``level``, as a JPEG."""
    return opencv().imencode(".jpg", np.full((*size, 3), level, np.uint8))[1].tobytes()


GOOD_1 = [10, 20, 30, 40, 50, 60]
GOOD_2 = [70, 80, 90, LAST]
TRUNCATED = jpeg(99)[:300]
ZEROED = bytearray(jpeg(98))
ZEROED[2:200] = bytes(198)  # the headers (quantisation, Huffman tables) gone
BROKEN_PARTS = 4  # truncated, zeroed, random bytes, a part shorter than its Content-Length
GARBAGE_RUNS = 1
FIRST_CONNECTION = [  # frames 10..60, 4 broken parts, a run of garbage, a size change
    part(jpeg(10)), part(jpeg(20)), part(TRUNCATED), part(jpeg(30)),
    b"\x00garbage\xff" * 50 + b"\r\n", bare_part(jpeg(40)), part(bytes(ZEROED)),
    part(np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes()),
    part(jpeg(97)[:200], length=len(jpeg(97))), part(jpeg(50, (96, 128))),
    part(jpeg(60, (96, 128)))]  # ... then the connection is closed: the transport broke
SECOND_CONNECTION = [part(jpeg(level, (96, 128))) for level in GOOD_2]


class Levels:
    def preprocess(self, image):
        return {}, (int(round(float(image.mean()))), image.shape[:2])

    def infer(self, feeds):
        return {}

    def postprocess(self, outputs, seen):
        return seen

    def annotate(self, image, result):
        return image

    def describe(self, result):
        return {}


def test_bad_parts_and_garbage_are_skipped_and_counted_and_a_broken_transport_reconnects():
    camera = MjpegServer(PACE_FPS, scripts=[FIRST_CONNECTION, SECOND_CONNECTION]).start()
    seen = []

    def collect(result):
        seen.append(result.result)
        return result.result[0] != LAST

    try:
        source = open_source(camera.url, reconnect=Reconnect(attempts=3, backoff_s=0.01,
                                                             max_backoff_s=0.05, timeout_s=5))
        assert isinstance(source, LiveSource) and source.frame_size == (64, 48)
        pipeline = Pipeline(source, Levels(), [CallbackSink(collect)], report_every=None)
        summary = pipeline.run()
    finally:
        camera.stop()
    counters = summary.stats.counters
    assert summary.reason == "sink_closed"
    assert counters["decode_errors"] == BROKEN_PARTS + GARBAGE_RUNS
    assert counters["reconnects"] == 1 and counters["drops"] == 1
    levels = [level for level, _ in seen]
    good = GOOD_1 + GOOD_2
    assert levels == sorted(levels) and levels[-1] == LAST  # in order, the broken ones left out
    assert all(min(abs(level - g) for g in good) <= 2 for level in levels)
    assert len(seen) + counters["dropped"] == len(good)  # every good frame came, or was stale
    sizes = {shape for _, shape in seen}
    assert sizes == {(48, 64), (96, 128)}  # the resolution change came through


def test_jpeg_checks_refuse_what_is_no_whole_jpeg():
    assert decode_jpeg(jpeg(40)) is not None
    assert decode_jpeg(TRUNCATED) is None
    assert decode_jpeg(bytes(ZEROED)) is None
    assert decode_jpeg(b"\xff\xd8" + bytes(100) + b"\xff\xd9") is None


def test_a_url_that_serves_no_decodable_frame_is_refused_before_the_run():
    with MjpegServer(PACE_FPS, scripts=[[part(TRUNCATED)] * 3], hold_last=False) as camera:
        with pytest.raises(InputError, match="sent no decodable frame"):
            open_source(camera.url, reconnect=Reconnect(timeout_s=5))


def test_an_http_url_that_is_no_mjpeg_camera_is_left_to_ffmpeg():
    """A page (200 text/html) is no multipart stream: FFmpeg is asked, and refuses it as before."""
    class Page(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>a login page</html>")

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        with pytest.raises(InputError, match="cannot open the stream"):
            open_source(f"http://127.0.0.1:{server.server_address[1]}/index.html",
                        reconnect=Reconnect(timeout_s=5))
    finally:
        server.shutdown()
        server.server_close()
