"""What the web view, the metrics, the health check and systemd's watchdog read: each stream's
latest annotated frame (as JPEG), its counts, its stats and its state, and the latest events,
updated by the pipeline's ``LiveSink`` and the run's publishers.

Why one state object read at request time: the page, ``/metrics``, ``/healthz`` and the watchdog
must agree with each other and with the JSON Lines; computing each from the same snapshot (and
counting nothing twice) is how they do. There is one liveness (``health``), and both ``/healthz``
and the systemd watchdog (``edgefuse.apps.systemd.Watch``) ask it.

A stream's state, in the order it is decided:
- ``lost``: its source gave up reconnecting (``stream_lost``); unhealthy until the app restarts;
- ``ended``: its pipeline closed its sinks (a file read to its end, ``max_frames`` reached); done,
  not unhealthy;
- ``reconnecting``: its source reported itself down (``stream_down``) and is trying again;
- ``stalled``: it claims to be up but delivered no frame for ``stall_s`` seconds (a hung camera
  read or device call: what a watchdog exists for);
- ``starting``: no frame yet, for less than ``stall_s``;
- ``live``: frames flow.
The process is healthy while no stream is lost, reconnecting or stalled.

A live sink whose recording stopped on a failed write (a full disk: ``recordings``) does not
make the process unhealthy: inference, tracking and events go on, and a restart frees no space.
``/healthz`` names it (``recording``), ``/metrics`` counts it.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from edgefuse.vision.streams.recording import Recordings

DEFAULT_STALL_S = 10.0
EVENTS_KEPT = 100  # the latest events /api/events can return
UNHEALTHY = ("lost", "reconnecting", "stalled")
STATES = ("starting", "live", "reconnecting", "stalled", "ended", "lost")


@dataclasses.dataclass
class StreamView:
    name: str
    jpeg: bytes | None = None
    version: int = 0  # increases with every frame, for the MJPEG streams to wait on
    frames: int = 0
    last_frame_at: float | None = None
    width: int | None = None  # of the JPEG, when the sink said
    up: bool = True
    lost: bool = False
    ended: bool = False
    counts: dict[str, Any] = dataclasses.field(default_factory=dict)
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Health:
    """The one liveness: ``ok`` while no stream is in an ``UNHEALTHY`` state; ``stalled`` names
    the streams that are (whatever the reason), ``states`` gives every stream's state."""

    ok: bool
    stalled: list[str]
    states: dict[str, str]


class LiveState:
    def __init__(self, streams: list[str], *, stall_s: float = DEFAULT_STALL_S,
                 clock: Callable[[], float] = time.monotonic,
                 events_kept: int = EVENTS_KEPT) -> None:
        if len(set(streams)) != len(streams):
            raise ValueError(f"stream names repeat: {streams}")
        self.recordings = Recordings()  # the live sinks' write states (recording.py)
        self._views = {name: StreamView(name) for name in streams}
        self._changed = threading.Condition()
        self.stall_s, self._clock = stall_s, clock
        self._started = clock()
        self._events: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(
            maxlen=events_kept)
        self._sequence = itertools.count(1)
        # the event publishers' delivery counts, per publisher (AnalyticsSetup.event_delivery)
        self.event_delivery: Callable[[], dict[str, dict[str, Any]]] = dict

    @property
    def streams(self) -> list[str]:
        return list(self._views)

    def frame(self, stream: str, jpeg: bytes | None, *, counts: dict[str, Any] | None = None,
              stats: dict[str, Any] | None = None, width: int | None = None) -> None:
        with self._changed:
            view = self._views[stream]
            if jpeg is not None:
                view.jpeg, view.width = jpeg, width
            view.version += 1
            view.frames += 1
            view.last_frame_at = self._clock()
            view.up = True
            if counts is not None:
                view.counts = counts
            if stats is not None:
                view.stats = stats
            self._changed.notify_all()

    def source_state(self, stream: str, state: str) -> None:
        """The stream's source went ``down``, came ``up`` or was ``lost`` (its ``on_state``)."""
        if state not in ("down", "up", "lost"):
            raise ValueError(f"unknown source state {state!r}")
        with self._changed:
            view = self._views[stream]
            view.up = state == "up"
            view.lost = view.lost or state == "lost"
            self._changed.notify_all()

    def end(self, stream: str) -> None:
        """The stream delivered its last frame (its pipeline closed its sinks)."""
        with self._changed:
            self._views[stream].ended = True
            self._changed.notify_all()

    def publish(self, event: dict[str, Any]) -> None:
        """Keep ``event`` among the latest (a publisher, as MQTT and the webhook are): any record
        the analytics emit, shown as it is; the caller's dict is not changed."""
        with self._changed:
            self._events.append((next(self._sequence), dict(event)))

    def close(self) -> None:
        """Nothing to deliver (a publisher's ``close``)."""

    def events(self, after: int = 0, limit: int = EVENTS_KEPT) -> tuple[int, list[dict]]:
        """The newest sequence number and the (at most ``limit``) latest events numbered above
        ``after``, oldest first, each with its number as ``seq``."""
        with self._changed:
            newest = self._events[-1][0] if self._events else 0
            chosen = [{**event, "seq": seq} for seq, event in self._events if seq > after]
        return newest, chosen[-limit:] if limit > 0 else []

    def latest(self, stream: str) -> tuple[int, bytes | None]:
        with self._changed:
            view = self._views[stream]
            return view.version, view.jpeg

    def wait_newer(self, stream: str, version: int, timeout: float) -> tuple[int, bytes | None]:
        """The latest frame once its version passes ``version`` (or after ``timeout``)."""
        with self._changed:
            self._changed.wait_for(lambda: self._views[stream].version > version, timeout)
            view = self._views[stream]
            return view.version, view.jpeg

    def wait_any_newer(self, versions: dict[str, int], timeout: float
                       ) -> dict[str, tuple[int, bytes, int | None]]:
        """Each stream's latest frame (version, JPEG, its width) whose version passed its entry
        in ``versions``, once any has (or nothing after ``timeout``): what one connection
        showing every tile waits on."""
        def newer() -> dict[str, tuple[int, bytes, int | None]]:
            return {name: (view.version, view.jpeg, view.width)
                    for name, view in self._views.items()
                    if view.jpeg is not None and view.version > versions.get(name, 0)}

        with self._changed:
            self._changed.wait_for(lambda: bool(newer()), timeout)
            return newer()

    def health(self) -> Health:
        now = self._clock()
        with self._changed:
            states = {name: self._state(view, now) for name, view in self._views.items()}
        stalled = [name for name, state in states.items() if state in UNHEALTHY]
        return Health(not stalled, stalled, states)

    def recording(self) -> dict[str, str]:
        """Each live file sink's recording state (``stream/sink``: ``recording`` or the reason
        it stopped), as ``/healthz`` shows it (no path: ``/healthz`` needs no token)."""
        return {f"{s.stream}/{s.sink}": "recording" if s.recording else s.reason
                for s in self.recordings.states()}

    def healthy(self) -> bool:
        return self.health().ok

    def stalled(self) -> list[str]:
        return self.health().stalled

    def snapshot(self) -> dict[str, Any]:
        """JSON-able: per stream, its state, frames, seconds since the last frame, counts,
        stats (an ended or lost stream's stats are its last ones)."""
        now = self._clock()
        with self._changed:
            return {name: {"state": (state := self._state(view, now)), "frames": view.frames,
                           "up": view.up, "ended": view.ended, "stalled": state in UNHEALTHY,
                           "since_last_frame_s": None if view.last_frame_at is None
                           else round(now - view.last_frame_at, 3),
                           "counts": view.counts, "stats": view.stats}
                    for name, view in self._views.items()}

    def _state(self, view: StreamView, now: float) -> str:
        if view.lost:
            return "lost"
        if view.ended:
            return "ended"
        if not view.up:
            return "reconnecting"
        if now - (view.last_frame_at or self._started) > self.stall_s:
            return "stalled"
        return "starting" if view.last_frame_at is None else "live"
