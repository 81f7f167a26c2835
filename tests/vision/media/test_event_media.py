"""Snapshots of events: written whole before the event is published, the object boxed, the path
in the event; a snapshot that cannot be written is left out of the event, never claimed."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.task import Tracked
from edgefuse.vision.media import snapshots
from edgefuse.vision.media.event_media import EventMedia, EventMediaOptions
from edgefuse.vision.media.retention import Retention
from edgefuse.vision.media.snapshots import BOX_COLOUR
from edgefuse.vision.streams.frames import Frame
from edgefuse.vision.streams.recording import Recordings
from edgefuse.vision.track.byte_tracker import Tracks
from tests.full_disk import fill, tmpfs
from tests.needs import optional

pytestmark = pytest.mark.unit
cv2 = optional("cv2")
AT = 1_800_000_000.25


def _tracks(box):
    return Tracks(ids=np.array([7]), boxes=np.array([box], np.float32),
                  scores=np.array([0.9], np.float32), classes=np.array([0]),
                  detection_index=np.array([0]))


def _crossing():
    return {"type": "line_crossed", "line": "door", "direction": "in", "track_id": 7,
            "class": "person", "stream": "gate", "time": AT}


def test_the_snapshot_is_written_whole_with_the_object_boxed_and_named_in_the_event(tmp_path):
    published = []
    media = EventMedia(EventMediaOptions(tmp_path / "events"), published.append)
    stream = media.stream("gate")
    image = np.full((240, 320, 3), 40, np.uint8)
    events = [_crossing(), {"type": "zone_left", "zone": "bay", "track_id": 7,
                            "stream": "gate", "time": AT}]
    stream.on_events(events, Frame(12, image, AT, 0.0), _tracks([100, 80, 180, 200]))
    assert events[0]["snapshot"] == "gate/20270115T080000.250Z-line_crossed-door-7.jpg"
    assert "snapshot" not in events[1]  # no object to show for a zone exit
    shot = cv2.imread(str(tmp_path / "events" / events[0]["snapshot"]))
    assert shot.shape == image.shape
    # the box's border has the box colour, its inside is the frame as it was
    assert np.abs(shot[140, 100].astype(int) - BOX_COLOUR).max() < 40
    assert np.abs(shot[140, 140].astype(int) - 40).max() < 6
    assert image.max() == 40  # the frame itself is not drawn on
    assert sorted(p.name for p in (tmp_path / "events" / "gate").iterdir()) == [
        "20270115T080000.250Z-line_crossed-door-7.jpg"]


def test_the_snapshot_exists_when_the_tracker_publishes_the_event(tmp_path):
    seen = []

    class Publisher:
        def publish(self, event):
            seen.append((event.get("snapshot"),
                         (tmp_path / event["snapshot"]).is_file() if "snapshot" in event
                         else None))

    class Boxes:
        class_names = ("person",)

        def postprocess(self, outputs, geometry):
            return outputs["detections"]

    media = EventMedia(EventMediaOptions(tmp_path), lambda event: None).stream("gate")
    tracked = Tracked(Boxes(), stream="gate", lines=[LineCounter("door", (50, 0), (50, 100))],
                      publishers=[Publisher()], on_events=media.on_events)
    for index, x in enumerate(range(0, 64, 4)):
        found = Detections(np.array([[x, 40, x + 40, 60]], np.float32),
                           np.array([0.9], np.float32), np.array([0]))
        tracked.postprocess({"detections": found}, None,
                            Frame(index, np.zeros((100, 120, 3), np.uint8), AT + index, 0.0))
    assert len(seen) == 1 and seen[0][0].startswith("gate/") and seen[0][1] is True


def test_a_snapshot_that_cannot_be_written_is_not_claimed(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots, "write_snapshot", full_disk)
    monkeypatch.setattr("edgefuse.vision.media.event_media.write_snapshot", full_disk)
    stream = EventMedia(EventMediaOptions(tmp_path), lambda event: None).stream("gate")
    events = [_crossing()]
    stream.on_events(events, Frame(1, np.zeros((64, 64, 3), np.uint8), AT, 0.0),
                     _tracks([1, 1, 20, 20]))
    assert "snapshot" not in events[0] and stream.failed == 1
    assert list((tmp_path / "gate").iterdir()) == []


def test_a_snapshot_deleted_at_once_by_a_tiny_max_mb_is_not_claimed(tmp_path):
    stream = EventMedia(EventMediaOptions(tmp_path, Retention(max_bytes=1)),
                        lambda event: None).stream("gate")
    events = [_crossing()]
    stream.on_events(events, Frame(1, np.zeros((64, 64, 3), np.uint8), AT, 0.0),
                     _tracks([1, 1, 20, 20]))
    assert "snapshot" not in events[0]


def test_the_event_media_folder_must_be_a_folder(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="event media folder .* is a file"):
        EventMedia(EventMediaOptions(tmp_path / "file"), lambda event: None)


def test_on_a_really_full_disk_a_snapshot_is_not_claimed_counted_and_resumed(tmp_path):
    with tmpfs(tmp_path / "full", "256k") as folder:
        recordings = Recordings()
        stream = EventMedia(EventMediaOptions(folder), lambda event: None,
                            recordings).stream("gate")
        filler = fill(folder)
        frame = Frame(1, np.random.default_rng(0).integers(0, 256, (240, 320, 3), np.uint8), AT,
                      0.0)
        events = [_crossing()]
        stream.on_events(events, frame, _tracks([1, 1, 200, 200]))  # the tracker goes on
        assert "snapshot" not in events[0] and stream.failed == 1
        state = recordings.states()[0]
        assert (state.stream, state.sink, state.reason, state.errors) == (
            "gate", "snapshots", "disk-full", {"disk-full": 1})
        assert [p.name for p in (folder / "gate").iterdir()] == []  # no temporary either
        filler.unlink()
        events = [_crossing()]
        stream.on_events(events, frame, _tracks([1, 1, 200, 200]))
        assert (folder / events[0]["snapshot"]).is_file() and recordings.states()[0].recording
