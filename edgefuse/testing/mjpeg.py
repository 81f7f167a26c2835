"""A live camera on 127.0.0.1: numbered JPEG frames over HTTP (MJPEG), as IP cameras serve them.

Why in the kit: a live source's behaviour (dropping stale frames, latency, reconnecting, a stream
that stalls) can only be tested against a stream that runs at its own pace, and OpenCV's FFmpeg
opens ``http://.../stream.mjpg`` (``multipart/x-mixed-replace``) the way it opens a camera's.
Each frame carries its number in a strip of grey blocks (JPEG-proof), so a test or a benchmark
reads back which frame a result came from and when the server sent it (``sent``):

    server = MjpegServer(fps=25)
    server.start()
    ... open_source(server.url) ...
    number = decode_number(frame.image)
    latency = time.perf_counter() - server.sent[number]

``pause()`` keeps the connections open and sends nothing (a stalled camera), ``resume()`` goes
on; ``stop()`` closes everything (a camera gone), ``start()`` again serves on the same port.
``scene`` draws each frame's picture (default: flat grey) below the number strip.

A broken camera plays ``scripts`` instead, raw bytes per connection (``part`` frames a JPEG, or
anything else: garbage, a truncated JPEG, a part shorter than its Content-Length, a frame of
another size): the first client gets ``scripts[0]`` and then the connection is closed (the
transport breaks), the next ``scripts[1]``, and so on; the last script's connection is held open
until ``stop`` (``hold_last``), and a client beyond the scripts gets 503. One chunk every
``1 / fps`` seconds, the camera's own pace.

    MjpegServer(fps=100, scripts=[[part(good), b"garbage", part(good[:300])], [part(good)]])
"""

from __future__ import annotations

import http.server
import socketserver
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from edgefuse._cv import cv2

DIGITS = 4  # frame numbers up to 16**4, one 16 x 16 grey block per hex digit
STRIP = 16  # the number strip's height in pixels


def encode_number(image: np.ndarray, number: int) -> np.ndarray:
    """``image`` (BGR, at least 16 x 64) with ``number`` written in its top-left strip."""
    for position in range(DIGITS):
        digit = (number >> (4 * (DIGITS - 1 - position))) & 0xF
        image[:STRIP, 16 * position:16 * (position + 1)] = digit * 16 + 8
    return image


def part(data: bytes, length: int | None = None) -> bytes:
    """``data`` as one part of the multipart stream, its Content-Length ``length`` (default: its
    own; a larger one makes a part the camera cut short)."""
    length = len(data) if length is None else length
    return (b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % length
            + data + b"\r\n")


def bare_part(data: bytes) -> bytes:
    """A part without Content-Length, as some cameras send them: its end is the next boundary."""
    return b"--frame\r\nContent-Type: image/jpeg\r\n\r\n" + data + b"\r\n"


def decode_number(image: np.ndarray) -> int:
    """The number ``encode_number`` wrote into ``image`` (read back through JPEG)."""
    number = 0
    for position in range(DIGITS):
        value = float(image[4:12, 16 * position + 4:16 * position + 12].mean())
        number = number * 16 + int(round((value - 8) / 16))
    return number


class MjpegServer:
    """Serves numbered frames at ``fps`` to every client (see the module docstring)."""

    def __init__(self, fps: float = 250.0, *, size: tuple[int, int] = (48, 64),
                 scene: Callable[[int], np.ndarray] | None = None, quality: int = 90,
                 scripts: Sequence[Sequence[bytes]] | None = None,
                 hold_last: bool = True) -> None:
        self.fps = fps
        self.size = size
        self.scene = scene or (lambda number: np.full((*size, 3), 96, np.uint8))
        self.quality = quality
        self.scripts, self.hold_last = scripts, hold_last
        self.connections = 0
        self.sent: dict[int, float] = {}
        self.next_number = 0
        self.port = 0
        self.running = threading.Event()
        self.stopped = threading.Event()
        self.flowing = threading.Event()  # cleared by pause()
        self.idle = threading.Event()  # set while paused and no frame is being sent
        self._server: socketserver.TCPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/stream.mjpg"

    def start(self) -> MjpegServer:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with owner._lock:
                    connection = owner.connections
                    owner.connections += 1
                scripts = owner.scripts
                if scripts is not None and connection >= len(scripts):
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                try:
                    if scripts is None:
                        self._frames()
                    else:
                        self._script(scripts[connection], connection == len(scripts) - 1)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _frames(self) -> None:
                while owner.running.is_set():
                    if not owner.flowing.is_set():
                        owner.idle.set()
                        owner.flowing.wait(0.05)
                        continue
                    self.wfile.write(owner._part())
                    time.sleep(1 / owner.fps)

            def _script(self, chunks: Sequence[bytes], last: bool) -> None:
                for chunk in chunks:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    time.sleep(1 / owner.fps)  # the camera's pace, not a wait in a test
                if last and owner.hold_last:
                    owner.stopped.wait()
                self.close_connection = True

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self.stopped.clear()
        self.running.set()
        self.flowing.set()
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         name="mjpeg-server", daemon=True).start()
        return self

    def _part(self) -> bytes:
        with self._lock:
            number = self.next_number
            self.next_number += 1
        image = encode_number(np.ascontiguousarray(self.scene(number)), number)
        data = cv2().imencode(".jpg", image, [cv2().IMWRITE_JPEG_QUALITY, self.quality])[1]
        self.sent[number] = time.perf_counter()
        return part(data.tobytes())

    def pause(self) -> None:
        """Stop sending (connections stay open): a stalled camera."""
        self.idle.clear()
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def stop(self) -> None:
        self.running.clear()
        self.stopped.set()
        self.flowing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MjpegServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
