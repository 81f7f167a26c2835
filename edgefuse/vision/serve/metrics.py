"""Prometheus metrics of a running app, read from ``LiveState`` at scrape time.

Names (all labelled ``stream``): ``edgefuse_frames_total``, ``edgefuse_fps``,
``edgefuse_latency_ms{quantile="0.5"|"0.95"}``, ``edgefuse_dropped_frames_total``,
``edgefuse_reconnects_total``, ``edgefuse_decode_errors_total`` (a camera's frames that were no
decodable picture, a file's frames lost to truncation), ``edgefuse_stream_up``,
``edgefuse_stream_state{state}`` (1 for the stream's state, 0 for the others: Prometheus' enum
pattern), ``edgefuse_line_crossings_total
{line,direction,class}``, ``edgefuse_zone_occupancy{zone,class}``, ``edgefuse_zone_entries_total
{zone,class}``; per event publisher (``mqtt``, ``webhook``): ``edgefuse_events_emitted_total``
(this run), ``edgefuse_events_delivered_total``, ``edgefuse_events_queued`` (memory and disk
journal), ``edgefuse_events_dropped_total{reason}``.
A custom collector rather than counters incremented along the way: the numbers
are the ones the pipeline already keeps, so the page, the JSON Lines and the scrape cannot
disagree. A stream that ended or was lost has ``edgefuse_stream_up 0`` and no ``edgefuse_fps`` or
latency series (its last rate would read as a rate it still has); its counters stay.

The live file sinks (``LiveState.recordings``): ``edgefuse_sink_errors_total{stream,sink,reason}``
(writes that failed: ``disk-full`` or the errno's name), ``edgefuse_sink_recording{stream,sink}``
(0 while a failed write keeps it stopped), ``edgefuse_disk_free_bytes{path}`` (each folder they
write in, asked at scrape time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from edgefuse._deps import require
from edgefuse.vision.serve.state import STATES, LiveState
from edgefuse.vision.streams.recording import Recordings


def registry_for(state: LiveState) -> Any:
    """A ``prometheus_client`` registry holding one collector over ``state``."""
    client = require("prometheus_client", extra="serve", purpose="the /metrics endpoint")
    core = require("prometheus_client.core", extra="serve", purpose="the /metrics endpoint")
    registry = client.CollectorRegistry()

    class _Collector:
        def collect(self) -> Iterator[Any]:
            yield from _families(core, state.snapshot())
            yield from _recording_families(core, state.recordings)
            yield from _event_families(core, state.event_delivery())

    registry.register(_Collector())
    return registry


def render(registry: Any) -> bytes:
    client = require("prometheus_client", extra="serve", purpose="the /metrics endpoint")
    return client.generate_latest(registry)


def _families(core: Any, snapshot: dict[str, Any]) -> Iterator[Any]:
    gauge, counter = core.GaugeMetricFamily, core.CounterMetricFamily
    frames = counter("edgefuse_frames", "frames through the pipeline", labels=["stream"])
    fps = gauge("edgefuse_fps", "frames per second over the stats window", labels=["stream"])
    latency = gauge("edgefuse_latency_ms", "capture to sink, milliseconds",
                    labels=["stream", "quantile"])
    dropped = counter("edgefuse_dropped_frames", "frames dropped as stale", labels=["stream"])
    reconnects = counter("edgefuse_reconnects", "source reconnections", labels=["stream"])
    drops = counter("edgefuse_stream_drops", "times the source went down", labels=["stream"])
    decode_errors = counter("edgefuse_decode_errors", "frames skipped as undecodable (broken "
                            "JPEG, garbage on the connection, a truncated file)",
                            labels=["stream"])
    up = gauge("edgefuse_stream_up", "1 while the stream delivers frames", labels=["stream"])
    states = gauge("edgefuse_stream_state", "1 for the stream's state (starting, live, "
                   "reconnecting, stalled, ended, lost)", labels=["stream", "state"])
    crossings = counter("edgefuse_line_crossings", "tracks crossing a counting line",
                        labels=["stream", "line", "direction", "class"])
    occupancy = gauge("edgefuse_zone_occupancy", "tracks inside a zone now",
                      labels=["stream", "zone", "class"])
    entries = counter("edgefuse_zone_entries", "tracks that entered a zone",
                      labels=["stream", "zone", "class"])
    for name, view in snapshot.items():
        stats = view["stats"]
        frames.add_metric([name], view["frames"])
        running = view["state"] not in ("ended", "lost")
        if running:
            fps.add_metric([name], float(stats.get("fps", 0.0)))
        for quantile, key in (("0.5", "latency_p50_ms"), ("0.95", "latency_p95_ms")):
            if running and key in stats:
                latency.add_metric([name, quantile], float(stats[key]))
        dropped.add_metric([name], float(stats.get("dropped", 0)))
        reconnects.add_metric([name], float(stats.get("reconnects", 0)))
        drops.add_metric([name], float(stats.get("drops", 0)))
        decode_errors.add_metric([name], float(stats.get("decode_errors", 0)))
        up.add_metric([name], 1.0 if view["state"] == "live" else 0.0)
        for state in STATES:
            states.add_metric([name, state], 1.0 if view["state"] == state else 0.0)
        for line, totals in view["counts"].get("lines", {}).items():
            for direction, per_class in totals.items():
                for cls, count in per_class.items():
                    crossings.add_metric([name, line, direction, cls], count)
        for zone, zone_counts in view["counts"].get("zones", {}).items():
            for cls, count in zone_counts.get("occupancy", {}).items():
                occupancy.add_metric([name, zone, cls], count)
            for cls, count in zone_counts.get("entries", {}).items():
                entries.add_metric([name, zone, cls], count)
    yield from (frames, fps, latency, dropped, reconnects, drops, decode_errors, up, states,
                crossings, occupancy, entries)


def _recording_families(core: Any, recordings: Recordings) -> Iterator[Any]:
    errors = core.CounterMetricFamily("edgefuse_sink_errors", "writes of a live sink that "
                                      "failed, by reason (disk-full or the errno's name)",
                                      labels=["stream", "sink", "reason"])
    recording = core.GaugeMetricFamily("edgefuse_sink_recording", "1 while a live sink records, "
                                       "0 while a failed write keeps it stopped",
                                       labels=["stream", "sink"])
    free = core.GaugeMetricFamily("edgefuse_disk_free_bytes", "bytes free for the app in a "
                                  "folder a live sink writes in (df's Avail)", labels=["path"])
    for state in recordings.states():
        recording.add_metric([state.stream, state.sink], 1.0 if state.recording else 0.0)
        for reason, count in state.errors.items():
            errors.add_metric([state.stream, state.sink, reason], count)
    for path, available in recordings.free_bytes().items():
        if available >= 0:
            free.add_metric([path], available)
    yield from (errors, recording, free)


def _event_families(core: Any, delivery: dict[str, dict[str, Any]]) -> Iterator[Any]:
    """The publishers' counts: every event emitted is delivered, queued or dropped (reason)."""
    emitted = core.CounterMetricFamily("edgefuse_events_emitted", "events handed to the "
                                       "publisher by this run", labels=["publisher"])
    delivered = core.CounterMetricFamily("edgefuse_events_delivered", "events the receiver "
                                         "acknowledged", labels=["publisher"])
    queued = core.GaugeMetricFamily("edgefuse_events_queued", "events waiting, in memory and "
                                    "in the disk journal", labels=["publisher"])
    dropped = core.CounterMetricFamily("edgefuse_events_dropped", "events given up, by reason",
                                       labels=["publisher", "reason"])
    for publisher, stats in delivery.items():
        emitted.add_metric([publisher], stats["accepted"])
        delivered.add_metric([publisher], stats["delivered"])
        queued.add_metric([publisher], stats["queued"])
        for reason, count in stats["dropped"].items():
            dropped.add_metric([publisher, reason], count)
    yield from (emitted, delivered, queued, dropped)
