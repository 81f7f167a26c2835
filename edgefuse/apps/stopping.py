"""Stopping the app by signal as a service manager does: SIGTERM, SIGHUP and Ctrl-C alike.

Why: ``systemctl stop``, ``docker stop`` and a pod's termination send SIGTERM (a hang-up, SIGHUP,
comes from a closed terminal or ``systemctl kill -s HUP``), and Python's default for SIGTERM is
to die on the spot: no summary, the frames in flight lost, every staged output left as a hidden
temporary file. Each of the three is handled like a first Ctrl-C: reading stops, the frames in
flight are finished, every sink is closed and committed, the summary is printed; a second signal
of any of them drops the frames in flight and still closes the sinks. The handlers only record
the request (``Pipeline.interrupt``); the thread waiting in ``Pipeline.run`` acts on it, so no
exception is raised at an arbitrary point of the program.

How long a stop takes is bounded: the frames in flight get ``stop_timeout_s``, then they are
dropped and the stage threads get ``ABORT_WAIT_S`` to notice, then the source closes (a live
reader blocked in a network read gets ``reconnect.timeout_s`` + 1 s). ``stop_bound_s`` adds it
up; the bundle's unit sets ``TimeoutStopSec`` above it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from edgefuse.vision.streams.multi import MultiPipeline
from edgefuse.vision.streams.pipeline import ABORT_WAIT_S, Pipeline

REASONS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
if hasattr(signal, "SIGHUP"):  # not on Windows
    REASONS[signal.SIGHUP] = "hangup"
EXIT_CODES = {"interrupted": 130}  # a Ctrl-C exits 130 as shells expect; a service stop exits 0
_MARGIN_S = 5.0  # closing the sinks (an mp4's index), printing, exiting


def stop_bound_s(stop_timeout_s: float, source_timeout_s: float) -> float:
    """The longest a signalled stop can take, in seconds (see the module docstring)."""
    return stop_timeout_s + ABORT_WAIT_S + source_timeout_s + 1.0 + _MARGIN_S


class StopRequests:
    """Signals received before the pipeline exists are kept and handed to it on ``attach``."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.pipeline: Pipeline | MultiPipeline | None = None

    def __call__(self, number: int, frame: object) -> None:
        reason = REASONS.get(number, "stopped")
        if self.pipeline is None:
            self.pending.append(reason)
        else:
            self.pipeline.interrupt(reason)

    def attach(self, pipeline: Pipeline | MultiPipeline) -> None:
        self.pipeline = pipeline
        pending, self.pending = self.pending, []
        for reason in pending:
            pipeline.interrupt(reason)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequests]:
    """SIGINT, SIGTERM and SIGHUP recorded as stop requests while the block runs (from the main
    thread only, where Python delivers signals; elsewhere nothing changes)."""
    requests = StopRequests()
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    previous = {number: signal.signal(number, requests) for number in REASONS}
    try:
        yield requests
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
