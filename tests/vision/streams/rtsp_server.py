"""A real RTSP camera on 127.0.0.1 for tests: GStreamer's RTSP server (Debian's
gir1.2-gst-rtsp-server-1.0, gstreamer1.0-plugins-good/-bad, python3-gi) serving an H.264 MP4 at
its own pace, each client from the first frame.

Why GStreamer and not ffmpeg: ffmpeg's ``-rtsp_flags listen`` is an option of its RTSP demuxer
(it waits for a client that pushes a stream), not of its muxer; ``ffmpeg -re -i CLIP -c copy -f
rtsp -rtsp_flags listen rtsp://127.0.0.1:PORT/live`` connects out as a client and stops with
"Connection refused" (ffmpeg 5.1, Debian 12). The server runs under the system's python3, where
python3-gi lives (the test's venv has no PyGObject); run as a script, this file is that server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
READY = "ready"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def missing() -> str | None:
    """Why the server cannot start here, or None."""
    if not Path(SYSTEM_PYTHON).exists():
        return f"no {SYSTEM_PYTHON}"
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import gi; gi.require_version('GstRtspServer', '1.0'); "
         "from gi.repository import GstRtspServer; from gi.repository import Gst; Gst.init(None);"
         "import sys; sys.exit(0 if all(Gst.ElementFactory.find(e) for e in "
         "('qtdemux', 'h264parse', 'rtph264pay')) else 3)"],
        capture_output=True, text=True)
    if probe.returncode:
        return (probe.stderr.strip().splitlines() or ["a GStreamer element is missing"])[-1]
    return None


class RtspServer:
    """The clip at rtsp://127.0.0.1:PORT/live; ``stop``/``start`` restart it on the same port."""

    def __init__(self, clip: Path) -> None:
        why = missing()
        if why is not None:
            import pytest  # noqa: PLC0415 (this file also runs as the server, without pytest)

            if os.environ.get("CI"):
                raise RuntimeError(f"CI must install GStreamer's RTSP server ({why}): see .ci/run")
            pytest.skip("GStreamer's RTSP server is not installed (apt-get install python3-gi "
                        "gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-good "
                        f"gstreamer1.0-plugins-bad): {why}")
        self.clip, self.port = clip, free_port()
        self.url = f"rtsp://127.0.0.1:{self.port}/live"
        self.process: subprocess.Popen | None = None

    def start(self) -> RtspServer:
        """Started and listening: the server says so once its socket is bound."""
        self.process = subprocess.Popen([SYSTEM_PYTHON, __file__, str(self.clip), str(self.port)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline().strip()
        if line != READY:
            self.process.kill()
            _, error = self.process.communicate()
            raise RuntimeError(f"the RTSP server did not start: {line!r} {error!r}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        if self.process is not None:
            self.process.stdout.close()
            self.process.stderr.close()


def serve(clip: str, port: str) -> None:
    import gi  # noqa: PLC0415 (the system python's, in the server process only)

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer  # noqa: PLC0415

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(f'( filesrc location="{clip}" ! qtdemux ! h264parse ! '
                       'rtph264pay name=pay0 pt=96 config-interval=1 )')
    server.get_mount_points().add_factory("/live", factory)
    if server.attach(None) == 0:
        raise SystemExit(f"cannot listen on 127.0.0.1:{port}")
    print(READY, flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    serve(*sys.argv[1:3])
