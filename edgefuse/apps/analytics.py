"""The detection app's analytics: tracking, counting lines, zones, events out and the live view.

Config keys (YAML, each optional; any of ``lines``, ``zones`` or ``events`` turns tracking on)::

    track: true                      # or ByteTrack's options: {track_thresh: 0.5, track_buffer: 30}
    lines:                           # pixels of the source frame; in = left-to-right of start->end
      - {name: door, start: [100, 400], end: [540, 400], margin: 3, anchor: bottom_center}
    zones:
      - {name: bay, polygon: [[0, 0], [320, 0], [320, 240], [0, 240]], confirm_frames: 2}
    events:
      mqtt: {host: 127.0.0.1, port: 1883, prefix: edgefuse, username: null, password: null}
      webhook: {url: "http://127.0.0.1:8123/api/webhook/cameras"}
      journal: {dir: /var/lib/edgefuse/cams/events, max_mb: 64}   # or DIR, or false
    event_media: out/events          # a snapshot per line crossing / zone entry (--event-media)
    #   or {dir: out/events, max_age_h: 168, max_mb: 2000}: retention by age and total size
    clips: {pre_s: 3, post_s: 5}     # and a clip around each (needs event_media and PyAV)
    serve: "127.0.0.1:8080"          # live view, /metrics, /healthz (--serve HOST:PORT)
    serve_token: null                # required when serving beyond 127.0.0.1

With several streams (``sources:``), a stream's own ``lines:``/``zones:`` replace these, which
otherwise apply to every stream; each stream gets its own tracker and counts (``wrap``). A
stream's source going down, coming up or being lost is the event ``stream_down`` /
``stream_up`` / ``stream_lost`` (``stream_state``), published and journalled like the others.
Events past a publisher's memory bound (``capacity``) spill to its journal on disk
(``<dir>/mqtt.journal``, ``<dir>/webhook.journal``, each at most ``max_mb``), which also keeps
what is undelivered across a restart (``edgefuse.vision.events.outbox``). The journal is on by
default under the service's state folder (``$STATE_DIRECTORY/events``: systemd sets it for the
unit ``edgefuse build`` writes); elsewhere it is on only when asked for; ``journal: false`` turns
it off. With ``event_media``, each line crossing and zone entry carries ``snapshot`` and, with
``clips``, is followed by ``clip_ready`` (``edgefuse.vision.media.event_media`` says what they
hold).

Every run keeps a ``LiveState`` (``state``), served or not: each stream's frames, source state
and end feed it (a ``LiveSink`` per stream, which encodes frames only when the page is served),
and it is the one liveness that ``/healthz`` and systemd's watchdog both ask. It is also a
publisher: the events the analytics emit (and ``stream_*``) reach the page's ``/api/events``.

Why here and not in the config module: these keys build objects with state and threads
(trackers, publishers, a web server) whose lifetime is the run's; ``AnalyticsSetup`` opens them
in order and closes them in reverse, so a run that fails half-way leaves no thread behind.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgefuse import _records as rec
from edgefuse.errors import InputError, Ref
from edgefuse.vision.analytics.anchors import ANCHORS
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.task import Tracked
from edgefuse.vision.analytics.zone import Zone
from edgefuse.vision.events.journal import EventJournal
from edgefuse.vision.events.mqtt import MqttPublisher
from edgefuse.vision.events.webhook import WebhookPublisher
from edgefuse.vision.media.clips import ClipOptions
from edgefuse.vision.media.event_media import EventMedia, EventMediaOptions
from edgefuse.vision.media.h264 import h264_available
from edgefuse.vision.media.retention import EVENT_MEDIA, Retention
from edgefuse.vision.serve.server import LiveServer
from edgefuse.vision.serve.sink import LiveSink
from edgefuse.vision.serve.state import DEFAULT_STALL_S, LiveState
from edgefuse.vision.streams.sinks import JsonlSink, Sink
from edgefuse.vision.track.byte_tracker import ByteTracker, TrackerOptions

_REF = Ref.BAD_CONFIG
TOKEN_VARIABLE = "EDGEFUSE_SERVE_TOKEN"
JOURNAL_MAX_MB = 64.0  # per publisher: some 300k events of ~200 bytes, hours of a busy gate


@dataclasses.dataclass(frozen=True)
class AnalyticsConfig:
    track: TrackerOptions | None = None
    lines: tuple[dict[str, Any], ...] = ()
    zones: tuple[dict[str, Any], ...] = ()
    mqtt: dict[str, Any] | None = None
    webhook: dict[str, Any] | None = None
    journal: dict[str, Any] | None = None  # {"dir": folder, "max_bytes": per publisher}
    serve: tuple[str, int] | None = None
    serve_token: str | None = None
    media: EventMediaOptions | None = None

    @property
    def wanted(self) -> bool:
        return bool(self.track or self.lines or self.zones or self.mqtt or self.webhook
                    or self.media)


def check_track(value: Any, key: str, where: str) -> TrackerOptions | None:
    if value is None or value is False:
        return None
    if value is True:
        return TrackerOptions()
    data = rec.check_mapping(value, f"{where} '{key}'", _REF)
    rec.check_keys(data, [f.name for f in dataclasses.fields(TrackerOptions)],
                   f"{where} '{key}'", _REF)
    try:
        return TrackerOptions(**{k: rec.number(v, f"{key}.{k}", where, _REF, low=0)
                                 for k, v in data.items()})
    except ValueError as exc:
        raise rec.bad(f"'{key}': {exc}", where, _REF) from exc


def check_lines(value: Any, key: str, where: str) -> tuple[dict[str, Any], ...]:
    return tuple(_line(item, f"{key}[{i}]", where) for i, item in enumerate(_list(value, key,
                                                                                 where)))


def check_zones(value: Any, key: str, where: str) -> tuple[dict[str, Any], ...]:
    return tuple(_zone(item, f"{key}[{i}]", where) for i, item in enumerate(_list(value, key,
                                                                                 where)))


def check_events(value: Any, key: str, where: str) -> dict[str, Any]:
    data = rec.check_mapping(value, f"{where} '{key}'", _REF)
    rec.check_keys(data, ["mqtt", "webhook", "journal"], f"{where} '{key}'", _REF)
    out: dict[str, Any] = {}
    if "journal" in data:
        out["journal"] = _journal(data["journal"], f"{key}.journal", where)
    if data.get("mqtt") is not None:
        mqtt = dict(rec.check_mapping(data["mqtt"], f"{where} '{key}.mqtt'", _REF))
        rec.check_keys(mqtt, ["host", "port", "prefix", "username", "password", "capacity"],
                       f"{where} '{key}.mqtt'", _REF)
        if not isinstance(mqtt.get("host"), str) or not mqtt["host"]:
            raise rec.bad(f"'{key}.mqtt.host' must name the broker", where, _REF)
        if "port" in mqtt:
            mqtt["port"] = int(rec.number(mqtt["port"], f"{key}.mqtt.port", where, _REF, low=1,
                                          high=65535, integer=True))
        out["mqtt"] = mqtt
    if data.get("webhook") is not None:
        hook = dict(rec.check_mapping(data["webhook"], f"{where} '{key}.webhook'", _REF))
        rec.check_keys(hook, ["url", "capacity", "timeout_s"], f"{where} '{key}.webhook'", _REF)
        if not isinstance(hook.get("url"), str):
            raise rec.bad(f"'{key}.webhook.url' must be a URL", where, _REF)
        out["webhook"] = hook
    return out


def _journal(value: Any, key: str, where: str) -> dict[str, Any] | None:
    """``DIR``, ``{dir: DIR, max_mb: MB}`` or false (no journal)."""
    if value is False or value is None:
        return None
    data = {"dir": value} if isinstance(value, (str, os.PathLike)) else dict(
        rec.check_mapping(value, f"{where} '{key}'", _REF))
    rec.check_keys(data, ["dir", "max_mb"], f"{where} '{key}'", _REF)
    folder = data.get("dir")
    if not isinstance(folder, (str, os.PathLike)) or not str(folder):
        raise rec.bad(f"'{key}.dir' must name the folder for the events' journals", where, _REF,
                      hint=f"for example {key}: {{dir: /var/lib/edgefuse/events, max_mb: 64}}")
    max_mb = rec.number(data.get("max_mb", JOURNAL_MAX_MB), f"{key}.max_mb", where, _REF, low=0)
    if max_mb < 0.001:
        raise rec.bad(f"'{key}.max_mb' must be at least 0.001 (1 kB), got {max_mb!r}", where,
                      _REF, hint=f"set {key}: false for no journal")
    return {"dir": os.fspath(folder), "max_bytes": int(max_mb * 1_000_000)}


def default_journal(events: Mapping[str, Any]) -> dict[str, Any] | None:
    """The journal the config asks for, else the service's default: ``$STATE_DIRECTORY/events``
    when systemd gave the unit a state folder (its first, when it gave several)."""
    if "journal" in events:
        return events["journal"]
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if not state:
        return None
    return {"dir": os.path.join(state, "events"), "max_bytes": int(JOURNAL_MAX_MB * 1_000_000)}


def check_serve(value: Any, key: str, where: str) -> tuple[str, int] | None:
    if value is None:
        return None
    text = str(value)
    host, _, port = text.rpartition(":") if ":" in text else ("127.0.0.1", "", text)
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise rec.bad(f"'{key}' must be HOST:PORT or PORT, got {value!r}", where, _REF,
                      hint="for example 127.0.0.1:8080")
    return (host or "127.0.0.1").strip("[]"), int(port)


def check_event_media(value: Any, key: str, where: str) -> dict[str, Any]:
    """``DIR`` or ``{dir: DIR, max_age_h: H, max_mb: MB}`` (a limit null: none)."""
    data = {"dir": value} if isinstance(value, (str, os.PathLike)) else dict(
        rec.check_mapping(value, f"{where} '{key}'", _REF))
    rec.check_keys(data, ["dir", "max_age_h", "max_mb"], f"{where} '{key}'", _REF)
    folder = data.get("dir")
    if not isinstance(folder, (str, os.PathLike)) or not str(folder):
        raise rec.bad(f"'{key}.dir' must name the folder for event snapshots and clips", where,
                      _REF, hint=f"for example {key}: out/events")
    defaults = {"max_age_h": EVENT_MEDIA.max_age_s / 3600, "max_mb": EVENT_MEDIA.max_bytes / 1e6}
    limits = {}
    for limit in ("max_age_h", "max_mb"):
        limit_value = data.get(limit, defaults[limit])
        if limit_value is not None and rec.number(limit_value, f"{key}.{limit}", where, _REF,
                                                  low=0) <= 0:
            raise rec.bad(f"'{key}.{limit}' must be above 0, got {limit_value!r}", where, _REF,
                          hint=f"set {key}.{limit}: null for no such limit")
        limits[limit] = None if limit_value is None else float(limit_value)
    retention = Retention(
        max_bytes=None if limits["max_mb"] is None else int(limits["max_mb"] * 1e6),
        max_age_s=None if limits["max_age_h"] is None else limits["max_age_h"] * 3600)
    return {"dir": os.fspath(folder), "retention": retention}


def check_clips(value: Any, key: str, where: str) -> ClipOptions | None:
    """``{pre_s, post_s, keyframe_s}`` seconds (each optional), or null for no clips."""
    if value is None or value is False:
        return None
    data = {} if value is True else rec.check_mapping(value, f"{where} '{key}'", _REF)
    rec.check_keys(data, [f.name for f in dataclasses.fields(ClipOptions)],
                   f"{where} '{key}'", _REF)
    seconds = {name: float(rec.number(v, f"{key}.{name}", where, _REF, low=0, high=600))
               for name, v in data.items()}
    if seconds.get("keyframe_s", 1.0) <= 0:
        raise rec.bad(f"'{key}.keyframe_s' must be above 0", where, _REF)
    if not h264_available():
        raise rec.bad(f"'{key}' needs PyAV (H.264 encoding), which is not installed", where,
                      Ref.MISSING_DEPENDENCY, hint="pip install 'edgefuse[vision]'")
    return ClipOptions(**seconds)


def media_options(config: Any) -> EventMediaOptions | None:
    """The event media the config asks for; ``clips`` without ``event_media`` is refused."""
    media, clips = getattr(config, "event_media", None), getattr(config, "clips", None)
    if clips is not None and media is None:
        raise InputError("'clips' needs 'event_media': the folder the clips are written to",
                         hint="add event_media: out/events (or pass --event-media out/events)",
                         reference=_REF)
    if media is None:
        return None
    retention, retain = media["retention"], getattr(config, "retain", None)
    if retain is not None and retain.min_free_bytes is not None:  # the card's floor holds too
        retention = dataclasses.replace(retention, min_free_bytes=retain.min_free_bytes)
    return EventMediaOptions(Path(media["dir"]), retention, clips)


def of(config: Any) -> AnalyticsConfig:
    """The analytics part of an app config (its values already checked key by key); empty for
    an app without these keys (segmentation)."""
    events = getattr(config, "events", None) or {}
    return AnalyticsConfig(media=media_options(config), track=getattr(config, "track", None),
                           lines=getattr(config, "lines", ()), zones=getattr(config, "zones", ()),
                           mqtt=events.get("mqtt"), webhook=events.get("webhook"),
                           journal=default_journal(events) if events.get("mqtt")
                           or events.get("webhook") else None,
                           serve=getattr(config, "serve", None),
                           serve_token=getattr(config, "serve_token", None)
                           or os.environ.get(TOKEN_VARIABLE) or None)


class AnalyticsSetup:
    """The run's analytics objects: ``wrap`` a detector per stream, ``sinks`` for the live state;
    ``close`` delivers what the publishers still hold and stops the server. ``stall_s``: how long
    a stream may deliver no frame before the run is unhealthy. The page shows the snapshots and
    clips of the event media folder (``event_media``), and no other file."""

    def __init__(self, config: AnalyticsConfig, streams: list[str], *,
                 stall_s: float = DEFAULT_STALL_S) -> None:
        self.config = config
        self.state = LiveState(streams, stall_s=stall_s)
        self.publishers: list[Any] = [self.state]
        self.server: LiveServer | None = None
        self.wrapped: dict[str, Tracked] = {}
        self.media: EventMedia | None = None
        self.journals: dict[str, JsonlSink] = {}  # each stream's JSON Lines, for clip_ready
        self.stream_events: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()
        self.state.event_delivery = self.event_delivery
        try:
            if config.mqtt:
                mqtt = dict(config.mqtt)
                self.publishers.append(MqttPublisher(mqtt.pop("host"), **mqtt,
                                                     journal=_open_journal(config, "mqtt")))
            if config.webhook:
                hook = dict(config.webhook)
                self.publishers.append(WebhookPublisher(hook.pop("url"), **hook,
                                                        journal=_open_journal(config,
                                                                              "webhook")))
            if config.media is not None:
                self.media = EventMedia(config.media, self._publish, self.state.recordings)
            if config.serve:
                self.server = LiveServer(self.state, *config.serve, token=config.serve_token,
                                         snapshot_dir=config.media.folder if config.media else None)
                self.server.start()
        except BaseException:
            self.close()
            raise

    def wrap(self, task: Any, stream: str, *, lines: tuple[dict[str, Any], ...] | None = None,
             zones: tuple[dict[str, Any], ...] | None = None,
             frame_size: tuple[int, int] | None = None) -> Any:
        """``task`` with tracking and analytics (its own tracker, so IDs are the stream's own)
        when the config or the stream's own ``lines``/``zones`` (which replace the config's)
        ask for any, else as it is. With ``frame_size`` (width, height) the lines and zones are
        checked against it now, else at the first frame."""
        lines = self.config.lines if lines is None else lines
        zones = self.config.zones if zones is None else zones
        if not (self.config.wanted or lines or zones):
            return task
        media = self.media.stream(stream) if self.media is not None else None
        tracked = Tracked(task, stream=stream, tracker=ByteTracker(self.config.track),
                          lines=[LineCounter(**spec) for spec in lines],
                          zones=[Zone(**spec) for spec in zones], publishers=self.publishers,
                          check_first_frame=frame_size is None,
                          on_events=media.on_events if media is not None else None)
        if frame_size is not None:
            tracked.check_within(*frame_size)
        self.wrapped[stream] = tracked
        return tracked

    def stream_state(self, stream: str, state: str, detail: str = "",
                     journal: JsonlSink | None = None) -> None:
        """A stream went ``down``, came ``up`` or was ``lost``: the event ``stream_<state>`` to
        every publisher and to the stream's JSON Lines (``journal``), counted in
        ``stream_events``, and the live state (the run's health) follows it."""
        event = {"type": f"stream_{state}", "stream": stream, "time": round(time.time(), 3),
                 "mono": round(time.perf_counter(), 3)}
        if detail:
            event["detail"] = detail
        for publisher in self.publishers:
            publisher.publish(event)
        if journal is not None:
            journal.note({"stream": stream, "time": event["time"], "mono": event["mono"],
                          "events": [event]})
        with self._lock:
            self.stream_events[(stream, event["type"])] += 1
        self.state.source_state(stream, state)

    def sinks(self, stream: str, stats: Any = None) -> list[Sink]:
        """The stream's clip recorder (with ``clips``) and its ``LiveSink`` (stats and JPEG
        frames only when served)."""
        media = self.media.streams.get(stream) if self.media is not None else None
        sinks: list[Sink] = [media.recorder] if media and media.recorder else []
        if self.server is None:
            return [*sinks, LiveSink(self.state, stream, encode=False)]
        return [*sinks, LiveSink(self.state, stream, stats=stats)]

    def _publish(self, event: dict[str, Any]) -> None:
        """An event that is no frame's (``clip_ready``): every publisher and the stream's JSON
        Lines hear it."""
        for publisher in self.publishers:
            publisher.publish(event)
        journal = self.journals.get(event.get("stream", ""))
        if journal is not None:
            journal.note({"stream": event["stream"], "time": event["time"],
                          "mono": event.get("mono"), "events": [event]})

    def event_delivery(self) -> dict[str, dict[str, Any]]:
        """Per publisher (``mqtt``, ``webhook``): events delivered, queued (of them in the
        journal) and dropped by reason (``Outbox.counts``)."""
        return {kind: publisher.stats() for publisher in self.publishers
                if (kind := _KINDS.get(type(publisher))) is not None}

    def delivery_summary(self) -> list[str]:
        """One line per publisher for the run's summary: every event accounted for."""
        lines = []
        for kind, stats in self.event_delivery().items():
            dropped = sum(stats["dropped"].values())
            reasons = ", ".join(f"{reason} {count}" for reason, count
                                in sorted(stats["dropped"].items()))
            carried = (f" (and {stats['carried']} from the last run's journal)"
                       if stats["carried"] else "")
            lines.append(f"events {kind}: {stats['accepted']} emitted{carried}, "
                         f"{stats['delivered']} "
                         f"delivered, {stats['queued']} queued ({stats['journalled']} in the "
                         f"journal), {dropped} dropped" + (f" ({reasons})" if reasons else ""))
        return lines

    def close(self) -> None:
        if self.media is not None:
            self.media.close()
        for publisher in reversed(self.publishers):
            publisher.close()
        if self.server is not None:
            self.server.stop()


_KINDS = {MqttPublisher: "mqtt", WebhookPublisher: "webhook"}


def _open_journal(config: AnalyticsConfig, kind: str) -> EventJournal | None:
    if config.journal is None:
        return None
    path = Path(config.journal["dir"]) / f"{kind}.journal"
    try:
        return EventJournal(path, config.journal["max_bytes"])
    except OSError as exc:
        raise InputError(f"cannot open the events' journal {path}: {exc.strerror or exc}",
                         hint="check events.journal.dir (a folder the app may write), or set "
                         "events.journal: false", reference=_REF) from exc


def _list(value: Any, key: str, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise rec.bad(f"'{key}' must be a list, got {value!r}", where, _REF)
    return value


def _point(value: Any, key: str, where: str) -> tuple[float, float]:
    return tuple(rec.numbers(value, key, 2, where, _REF))  # type: ignore[return-value]


def _named(item: Any, key: str, where: str, known: list[str]) -> Mapping[str, Any]:
    data = rec.check_mapping(item, f"{where} '{key}'", _REF)
    rec.check_keys(data, known, f"{where} '{key}'", _REF)
    if not isinstance(data.get("name"), str) or not data["name"]:
        raise rec.bad(f"'{key}.name' must be a non-empty string", where, _REF)
    if "anchor" in data:
        rec.choice(data["anchor"], f"{key}.anchor", ANCHORS, where, _REF)
    return data


def _line(item: Any, key: str, where: str) -> dict[str, Any]:
    data = _named(item, key, where, ["name", "start", "end", "margin", "anchor"])
    out = {**data, "start": _point(data.get("start"), f"{key}.start", where),
           "end": _point(data.get("end"), f"{key}.end", where)}
    if "margin" in data:
        out["margin"] = float(rec.number(data["margin"], f"{key}.margin", where, _REF, low=0))
    _refused_here(LineCounter, out, where)  # zero length and the rest, with the file named
    return out


def _zone(item: Any, key: str, where: str) -> dict[str, Any]:
    data = _named(item, key, where, ["name", "polygon", "anchor", "confirm_frames"])
    polygon = data.get("polygon")
    if not isinstance(polygon, list):
        raise rec.bad(f"'{key}.polygon' must be a list of [x, y] points", where, _REF)
    out = {**data, "polygon": [_point(p, f"{key}.polygon", where) for p in polygon]}
    if "confirm_frames" in data:
        out["confirm_frames"] = int(rec.number(data["confirm_frames"], f"{key}.confirm_frames",
                                               where, _REF, low=1, integer=True))
    _refused_here(Zone, out, where)
    return out


def _refused_here(kind: type, spec: dict[str, Any], where: str) -> None:
    try:
        kind(**spec)
    except InputError as exc:
        raise rec.bad(exc.message, where, _REF, hint=exc.hint) from None
