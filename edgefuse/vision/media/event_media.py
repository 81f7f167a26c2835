"""Events you can look at: a snapshot for every line crossing and zone entry, and a clip.

What a subscriber gets (MQTT, the webhook, the JSON Lines, the live view's ``/api/events``):

- the event itself, with ``snapshot``: the path of its JPEG (the frame it happened on, the
  object boxed and labelled), written whole before the event is published;
- with ``clips:`` configured, a second event once the clip is written whole::

      {"type": "clip_ready", "stream": "gate", "time": 1718000003.2,
       "event": "line_crossed", "event_time": 1718000000.1, "track_id": 7,
       "snapshot": "gate/20240610T061320.100Z-line_crossed-door-7.jpg",
       "clip": "gate/20240610T061320.100Z-line_crossed-door-7.mp4"}

Paths are relative to the event media folder (``event_media.dir``), with ``/`` separators, one
sub-folder per stream: a page that serves that folder at ``/media/`` shows ``/media/<snapshot>``
and plays ``/media/<clip>``; a program on the same machine opens ``<dir>/<snapshot>``. Names
are ``<UTC time with ms>-<type>-<line or zone>-<track id>`` (``snapshots.media_stem``), so they
sort by time. ``RetainedFolder`` deletes the oldest beyond the age and size limits.

Which events: ``line_crossed`` and ``zone_entered`` (``zone_left`` is the same object leaving;
stream states have no object to show).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgefuse._files import WriteFailedError, cannot_write, check_folder_writable
from edgefuse.errors import InputError, Ref
from edgefuse.vision.media.clips import ClipOptions, ClipRecorder
from edgefuse.vision.media.h264 import h264_available
from edgefuse.vision.media.retention import EVENT_MEDIA, RetainedFolder, Retention
from edgefuse.vision.media.snapshots import media_stem, write_snapshot
from edgefuse.vision.streams.frames import Frame, media_time
from edgefuse.vision.streams.recording import Recordings
from edgefuse.vision.streams.staging import free_name, remove_leftovers

log = logging.getLogger(__name__)

SHOWN_EVENTS = ("line_crossed", "zone_entered")
Publish = Callable[[dict[str, Any]], None]


@dataclasses.dataclass(frozen=True)
class EventMediaOptions:
    """Where snapshots (and clips) go and how long they stay; ``clips`` None: snapshots only."""

    folder: Path
    retention: Retention = EVENT_MEDIA
    clips: ClipOptions | None = None


class EventMedia:
    """The run's event media folder; ``stream(name)`` gives each stream its own recorder."""

    def __init__(self, options: EventMediaOptions, publish: Publish,
                 recordings: Recordings | None = None) -> None:
        if options.clips is not None and not h264_available():
            raise InputError("event clips need PyAV (H.264), which is not installed",
                             hint="pip install 'edgefuse[vision]', or remove 'clips:'",
                             reference=Ref.MISSING_DEPENDENCY)
        self.options = options
        self.folder = options.folder
        if self.folder.exists() and not self.folder.is_dir():
            raise InputError(f"event media folder '{self.folder}' is a file",
                             hint="give a folder for snapshots and clips",
                             reference=Ref.BAD_OUTPUT_PATH)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise cannot_write(self.folder, exc) from exc
        check_folder_writable(self.folder)
        self.retained = RetainedFolder(self.folder, options.retention)
        self.retained.enforce()
        self._publish = publish
        self.recordings = recordings  # each stream's snapshots and clips: /healthz, /metrics
        self.streams: dict[str, StreamMedia] = {}

    def stream(self, name: str) -> StreamMedia:
        media = StreamMedia(self, name)
        self.streams[name] = media
        return media

    def relative(self, path: Path) -> str:
        """``path`` as the events give it: relative to the folder, ``/``-separated."""
        return path.relative_to(self.folder).as_posix()

    def summary(self) -> str:
        """What was written, for the end of a run."""
        streams = list(self.streams.values())
        snapshots = sum(m.snapshots for m in streams)
        clips = sum(len(m.recorder.written) for m in streams if m.recorder is not None)
        failed = sum(m.failed + (m.recorder.failed if m.recorder else 0) for m in streams)
        parts = [f"{snapshots} snapshot(s)"]
        if self.options.clips is not None:
            parts.append(f"{clips} clip(s)")
        if failed:
            parts.append(f"{failed} not written (see the log)")
        if self.retained.deleted:
            parts.append(f"{self.retained.deleted} old file(s) deleted by retention")
        return f"event media in {self.folder}: " + ", ".join(parts)

    def close(self) -> None:
        """Finishes every stream's open clips (their recorders are sinks, closed by the
        pipeline first; this catches a run that failed before it started them)."""
        for media in self.streams.values():
            media.close()

    def clip_ready(self, event: dict[str, Any], path: Path) -> None:
        self.retained.add(path)
        ready = {"type": "clip_ready", "stream": event.get("stream"),
                 "time": round(time.time(), 3), "mono": round(time.perf_counter(), 3),
                 "event": event.get("type"),
                 "event_time": event.get("time"), "track_id": event.get("track_id"),
                 "clip": self.relative(path)}
        if "snapshot" in event:
            ready["snapshot"] = event["snapshot"]
        self._publish(ready)


class StreamMedia:
    """One stream's snapshots and clips: ``on_events`` from its tracker (before publishing),
    ``recorder`` (a sink) when clips are on."""

    def __init__(self, media: EventMedia, stream: str) -> None:
        self.media = media
        self.folder = media.folder / stream
        try:
            self.folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise cannot_write(media.folder, exc) from exc
        remove_leftovers(self.folder, ".+", ".tmp", "event snapshot")
        remove_leftovers(self.folder, ".+", ".mp4", "event clip")
        clips = media.options.clips
        recordings = media.recordings
        self.recording = (recordings.add(stream, "snapshots", media.folder)
                          if recordings is not None else None)
        self.recorder = (ClipRecorder(clips, on_clip=media.clip_ready, recording=(
            recordings.add(stream, "clips", media.folder) if recordings is not None else None))
            if clips is not None else None)
        self.snapshots = 0
        self.failed = 0

    def on_events(self, events: list[dict[str, Any]], frame: Frame, tracks: Any) -> None:
        """Writes the snapshot of each shown event and adds its path (``snapshot``); asks for
        its clip. A snapshot that cannot be written is logged and left out of the event."""
        boxes = {int(i): box for i, box in zip(tracks.ids, tracks.boxes, strict=True)}
        for event in events:
            if event.get("type") not in SHOWN_EVENTS:
                continue
            try:
                path = write_snapshot(self.folder, event, frame.image,
                                      boxes.get(int(event.get("track_id", -1))))
            except (OSError, WriteFailedError) as exc:
                self.failed += 1
                if self.recording is not None:
                    self.recording.failed(exc if isinstance(exc, WriteFailedError)
                                          else WriteFailedError(self.folder, exc))
                log.exception("event snapshot for %s could not be written", event["type"])
            else:
                self.snapshots += 1
                if self.recording is not None:
                    self.recording.succeeded()
                if path not in self.media.retained.add(path):  # not deleted at once (max_mb)
                    event["snapshot"] = self.media.relative(path)
            if self.recorder is not None:
                clip = free_name(self.folder / f"{media_stem(event)}.mp4")
                self.recorder.request(event, clip, frame.index, media_time(frame))

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
