"""An MJPEG camera on 127.0.0.1 that plays a script of raw bytes per connection: good JPEG parts,
broken ones, garbage, parts of another size; the tests of broken cameras start it for real."""

from __future__ import annotations

import http.server
import socketserver
import threading
import time

import numpy as np

from edgefuse._cv import cv2


def jpeg(level: int, size: tuple[int, int] = (48, 64)) -> bytes:
    return cv2().imencode(".jpg", np.full((*size, 3), level, np.uint8))[1].tobytes()


def part(data: bytes, length: int | None = None) -> bytes:
    length = len(data) if length is None else length
    return (b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % length
            + data + b"\r\n")


def bare_part(data: bytes) -> bytes:
    """A part without Content-Length: its end is the next boundary."""
    return b"--frame\r\nContent-Type: image/jpeg\r\n\r\n" + data + b"\r\n"


class ScriptedCamera:
    """Serves ``scripts[0]`` to the first client, then closes (the transport breaks),
    ``scripts[1]`` to the next, and so on; the last script's connection is held open until
    ``stop``. One part every few milliseconds (the camera's own pace); a client beyond the
    scripts gets 503."""

    def __init__(self, scripts: list[list[bytes]]) -> None:
        self.scripts = scripts
        self.connections = 0
        self.done = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                scripts = owner.scripts
                if owner.connections >= len(scripts):
                    self.send_error(503)
                    return
                script = scripts[owner.connections]
                owner.connections += 1
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                for chunk in script:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    time.sleep(0.01)  # the camera's pace, not a wait in the test
                if script is scripts[-1]:
                    owner.done.wait(30)
                self.close_connection = True

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/video.mjpg"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()
