"""Telling systemd how the app is: ready, alive while frames flow, stopping (``sd_notify``).

Why the protocol itself and no library: it is one datagram per message on the unix socket named
by ``NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace), newline-separated
``KEY=VALUE`` fields (sd_notify(3)), and a dependency for it would be another thing to install
on the board. Outside systemd (no ``NOTIFY_SOCKET``) nothing is sent.

What is sent (a unit with ``Type=notify`` and ``WatchdogSec=``):
- ``READY=1`` once the model is loaded and the first frame was read; until then systemd counts
  the start as in progress (``TimeoutStartSec``);
- ``WATCHDOG=1`` every half ``WATCHDOG_USEC`` (sd_watchdog_enabled(3)'s advice), and only while
  the run is healthy by the same liveness ``/healthz`` answers with (``LiveState.health``: no
  stream stalled, reconnecting or lost): a pipeline stuck on a dead camera or a hung device call
  stops petting, and systemd restarts it after ``WatchdogSec``. ``stall_s`` says how long a
  stream may go without a frame before it counts as stalled (half the watchdog at most);
- ``STATUS=`` with the frame count and rate, shown by ``systemctl status``;
- ``STOPPING=1`` as soon as a stop begins (a signal, the end of the source).
``WATCHDOG_PID``, when set, must be this process (else the watchdog is someone else's).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping

from edgefuse.vision.serve.state import LiveState
from edgefuse.vision.streams.multi import MultiPipeline
from edgefuse.vision.streams.pipeline import Pipeline

log = logging.getLogger(__name__)

POLL_S = 0.1  # how soon a stop or the first frame is told


class Notifier:
    """Sends sd_notify messages to ``address`` (a path, or ``\\0``-led abstract name)."""

    def __init__(self, address: str, watchdog_s: float | None = None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Notifier | None:
        """The notifier systemd asked for, or None outside a ``Type=notify`` unit."""
        address = environ.get("NOTIFY_SOCKET", "")
        if not address or address[0] not in "/@":
            return None
        if address[0] == "@":
            address = "\0" + address[1:]
        watchdog_s = None
        usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog_s = int(usec) / 1e6
        return cls(address, watchdog_s)

    def send(self, *fields: str) -> None:
        """One datagram; a notify socket that went away is logged, never fatal."""
        try:
            self._socket.sendto("\n".join(fields).encode("utf-8"), self.address)
        except OSError as exc:
            log.warning("cannot notify systemd at %r: %s", self.address, exc)

    def close(self) -> None:
        self._socket.close()


def stall_s(notifier: Notifier | None, default: float) -> float:
    """How long a stream may deliver no frame before the run is unhealthy: ``default``, or half
    the watchdog when that is shorter (a stall must stop the pets before systemd's deadline)."""
    if notifier is None or notifier.watchdog_s is None:
        return default
    return min(default, notifier.watchdog_s / 2)


class Watch:
    """A thread that tells ``notifier`` about ``pipeline`` (a ``Pipeline`` or a
    ``MultiPipeline``: its ``first_frame``, ``frames_done`` and ``stopping``) and the health of
    ``state`` (the run's ``LiveState``) while it runs (the module docstring). Use as a context
    manager around ``pipeline.run()``."""

    def __init__(self, notifier: Notifier, pipeline: Pipeline | MultiPipeline,
                 state: LiveState) -> None:
        self.notifier = notifier
        self.pipeline = pipeline
        self.state = state
        self.interval_s = notifier.watchdog_s / 2 if notifier.watchdog_s else None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edgefuse-notify", daemon=True)
        self.ready = False
        self.stopping = False

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()
        if not self.stopping:
            self.notifier.send("STOPPING=1")
        self.notifier.close()

    def _run(self) -> None:
        pipeline = self.pipeline
        next_ping = None
        while not self._done.wait(POLL_S):
            if not self.ready and pipeline.first_frame.is_set():
                self.ready = True
                self.notifier.send("READY=1", "STATUS=running: first frame read")
                next_ping = time.monotonic()
            if pipeline.stopping and not self.stopping:
                self.stopping = True
                self.notifier.send("STOPPING=1", "STATUS=stopping: finishing the frames in "
                                                 "flight")
            if (self.ready and self.interval_s is not None and not self.stopping
                    and time.monotonic() >= next_ping):
                next_ping = time.monotonic() + self.interval_s
                health = self.state.health()
                if health.ok:  # frames flow: pet the watchdog; a stall lets it bite
                    self.notifier.send("WATCHDOG=1",
                                       f"STATUS=running: {pipeline.frames_done} frames")
                else:
                    self.notifier.send("STATUS=unhealthy: " + ", ".join(
                        f"{name} {health.states[name]}" for name in health.stalled))
