"""Event clips cut from the ring of encoded packets: the pre-roll is in the clip (decoded and
checked frame by frame against the event's time), the ring stays bounded, overlapping events get
whole clips of their own, and a clip that cannot be written leaves nothing behind."""

from __future__ import annotations

import threading

import pytest

from edgefuse.vision.media.clips import ClipOptions, ClipRecorder
from edgefuse.vision.media.h264 import Mp4File
from tests.needs import optional
from tests.vision.media.clip_frames import decode, flat, result

pytestmark = pytest.mark.unit
optional("av")
FPS = 10.0


def _recorder(options: ClipOptions) -> tuple[ClipRecorder, list, threading.Event]:
    ready: list = []
    done = threading.Event()

    def on_clip(event, path):
        ready.append((event, path))
        done.set()

    recorder = ClipRecorder(options, on_clip=on_clip)
    recorder.start(fps=FPS, describe=lambda _: {})
    return recorder, ready, done


def _feed(recorder: ClipRecorder, frames: range) -> None:
    for index in frames:
        item = result(index, FPS)
        recorder.write(item, item.frame.image)


def test_the_clip_holds_the_pre_roll_from_a_keyframe_and_the_post_roll(tmp_path):
    recorder, ready, done = _recorder(ClipOptions(pre_s=2.0, post_s=1.5, keyframe_s=1.0))
    event = {"type": "line_crossed", "time": 0.0}
    recorder.request(event, tmp_path / "clip.mp4", index=50, clock=5.0)
    _feed(recorder, range(100))
    assert done.wait(30), "no clip_ready"
    recorder.close()
    assert ready == [(event, tmp_path / "clip.mp4")]
    frames = decode(tmp_path / "clip.mp4")
    # keyframes every 1.0 s: the last one at or before 5.0 - 2.0 s is frame 30; the clip ends
    # at the first frame at or past 5.0 + 1.5 s (frame 65)
    assert [index for _, index in frames] == list(range(30, 66))
    seconds = [t for t, _ in frames]
    assert seconds[0] == 0.0
    assert seconds == pytest.approx([i / FPS for i in range(36)], abs=1e-3)
    event_at = next(t for t, index in frames if index == 50)
    assert event_at == pytest.approx(2.0, abs=1e-3)  # the pre-roll: 2 s before the event


def test_the_ring_holds_only_the_pre_roll_and_its_keyframe(tmp_path):
    recorder, _, _ = _recorder(ClipOptions(pre_s=2.0, post_s=1.0, keyframe_s=1.0))
    _feed(recorder, range(120))
    recorder.close()
    held = recorder.ring.since(-1.0)
    assert held[0].packet.is_keyframe
    assert 2.0 <= held[-1].clock - held[0].clock < 3.0
    assert recorder.ring.bytes == sum(h.packet.size for h in held)


def test_overlapping_events_get_whole_clips_and_the_stream_end_finishes_them(tmp_path):
    recorder, ready, _ = _recorder(ClipOptions(pre_s=1.0, post_s=3.0, keyframe_s=1.0))
    recorder.request({"n": 1}, tmp_path / "a.mp4", index=20, clock=2.0)
    recorder.request({"n": 2}, tmp_path / "b.mp4", index=25, clock=2.5)
    _feed(recorder, range(40))  # ends at 3.9 s: both post-rolls are cut short by the end
    recorder.close()
    assert [path.name for _, path in ready] == ["a.mp4", "b.mp4"]
    assert [i for _, i in decode(tmp_path / "a.mp4")] == list(range(10, 40))
    assert [i for _, i in decode(tmp_path / "b.mp4")] == list(range(10, 40))


def test_a_failing_clip_write_leaves_nothing_and_the_next_clip_is_written(tmp_path,
                                                                          monkeypatch):
    writes = []
    real_write = Mp4File.write

    def failing(self, packets, *, copy=False):
        writes.append(self.path.name)
        if self.path.name == "bad.mp4" and writes.count("bad.mp4") > 5:
            raise OSError(28, "No space left on device")
        return real_write(self, packets, copy=copy)

    monkeypatch.setattr(Mp4File, "write", failing)
    recorder, ready, _ = _recorder(ClipOptions(pre_s=1.0, post_s=1.0, keyframe_s=1.0))
    recorder.request({"n": 1}, tmp_path / "bad.mp4", index=15, clock=1.5)
    recorder.request({"n": 2}, tmp_path / "good.mp4", index=40, clock=4.0)
    _feed(recorder, range(60))
    recorder.close()
    assert recorder.failed == 1
    assert [path.name for _, path in ready] == ["good.mp4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.mp4"]  # no temporary left


def test_a_clip_asked_for_after_its_pre_roll_left_the_ring_starts_at_the_oldest_keyframe(
        tmp_path):
    recorder, ready, _ = _recorder(ClipOptions(pre_s=1.0, post_s=0.5, keyframe_s=1.0))
    recorder.request({"n": 1}, tmp_path / "early.mp4", index=0, clock=0.0)
    _feed(recorder, range(10))
    recorder.close()
    assert [i for _, i in decode(tmp_path / "early.mp4")] == [0, 1, 2, 3, 4, 5]
    assert flat(0).shape == (120, 160, 3)


def test_a_stream_whose_frames_change_size_still_gets_its_clip(tmp_path):
    """A camera that reconnects at another resolution: its frames are scaled to the clip's."""
    recorder, ready, _ = _recorder(ClipOptions(pre_s=0.5, post_s=0.5, keyframe_s=0.5))
    recorder.request({"n": 1}, tmp_path / "resized.mp4", index=10, clock=1.0)
    for index in range(20):
        image = flat(index, *((160, 120) if index < 8 else (80, 60)))
        recorder.write(result(index, FPS), image)
    recorder.close()
    assert [path.name for _, path in ready] == ["resized.mp4"] and recorder.failed == 0
    assert [i for _, i in decode(tmp_path / "resized.mp4")] == list(range(5, 16))
