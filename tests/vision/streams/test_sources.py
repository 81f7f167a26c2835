"""Sources: files lose nothing and keep order, stride skips, live sources keep the newest frame."""

from __future__ import annotations

import time

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.vision.streams.sources import (
    CameraOptions,
    IterableSource,
    LiveSource,
    Reconnect,
    open_source,
)
from edgefuse.vision.streams.stats import PipelineStats
from tests.needs import optional
from tests.vision.models import write_clip

pytestmark = pytest.mark.unit

cv2 = optional("cv2")


def read_all(source):
    with source:
        return list(source)


def test_video_file_gives_every_frame_in_order(tmp_path):
    decoded = write_clip(tmp_path / "clip.mp4", frames=12, fps=10)
    source = open_source(tmp_path / "clip.mp4")
    assert not source.live and source.fps == pytest.approx(10)
    frames = read_all(source)
    assert [f.index for f in frames] == list(range(12))
    assert [f.pts for f in frames] == pytest.approx([i / 10 for i in range(12)])
    assert all(np.array_equal(f.image, d) for f, d in zip(frames, decoded, strict=True))


def test_stride_skips_on_purpose_and_counts_it(tmp_path):
    write_clip(tmp_path / "clip.mp4", frames=12)
    stats = PipelineStats([])
    source = open_source(str(tmp_path / "clip.mp4"), stride=3)
    source.attach(stats)
    assert [f.index for f in read_all(source)] == [0, 3, 6, 9]
    assert stats.counter("skipped") == 8
    frames = read_all(open_source(iter([np.zeros((4, 4, 3), np.uint8)] * 5), stride=2))
    assert [f.index for f in frames] == [0, 2, 4]


def test_image_folder_skips_and_counts_an_unreadable_image(tmp_path, caplog):
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"img{i}.png"), np.full((8, 10, 3), i, np.uint8))
    (tmp_path / "img1b.png").write_bytes(b"not an image")
    (tmp_path / "notes.txt").write_text("ignored")
    stats = PipelineStats([])
    source = open_source(tmp_path)
    source.attach(stats)
    frames = read_all(source)
    assert [f.name for f in frames] == ["img0.png", "img1.png", "img2.png"]
    assert [int(f.image[0, 0, 0]) for f in frames] == [0, 1, 2]
    assert stats.counter("unreadable") == 1 and "cannot decode" in caplog.text
    assert len(read_all(open_source(str(tmp_path / "img[02].png")))) == 2
    assert read_all(open_source(tmp_path / "img2.png"))[0].name == "img2.png"


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing.mp4", "does not exist"),
    (lambda p: p / "*.jpg", "holds no images"),
    (lambda p: (p / "bad.mp4").write_bytes(b"garbage") and p / "bad.mp4", "cannot open the video"),
    (lambda p: (p / "bad.jpg").write_bytes(b"garbage") and p / "bad.jpg", "cannot decode"),
])
def test_unreadable_sources_are_user_errors(tmp_path, make, message):
    with pytest.raises(InputError, match=message):
        source = open_source(make(tmp_path))
        read_all(source)


def test_iterables_and_arrays():
    grey = np.zeros((4, 5), np.uint8)
    frames = read_all(open_source([grey, np.ones((4, 5, 3), np.uint8)]))
    assert [f.image.shape for f in frames] == [(4, 5, 3), (4, 5, 3)]
    assert read_all(open_source(np.zeros((2, 3, 3), np.uint8)))[0].index == 0
    with pytest.raises(InputError, match=r"frame 1: a frame must be a uint8 \[h, w, 3\]"):
        read_all(open_source([grey, np.zeros((4, 5, 3), np.float32)]))
    with pytest.raises(InputError, match="cannot read frames from a float"):
        open_source(1.5)


def test_a_live_producer_faster_than_the_reader_drops_stale_frames():
    def produce():
        for i in range(200):
            time.sleep(0.001)
            yield np.full((4, 4, 3), i % 256, np.uint8)

    stats = PipelineStats([])
    source = open_source(produce(), live=True)
    source.attach(stats)
    seen = []
    deadline = time.monotonic() + 10
    while not source.finished and time.monotonic() < deadline:
        frame = source.read(timeout=0.1)
        if frame is not None:
            seen.append(frame.index)
            time.sleep(0.02)  # a slow consumer
    source.close()
    assert source.finished and seen == sorted(seen) and len(set(seen)) == len(seen)
    assert len(seen) < 100 and stats.counter("dropped") > 50
    assert stats.counter("dropped") + len(seen) <= 200


class FakeCamera:
    """cv2.VideoCapture stand-in that records what was asked of it."""

    opened: list[FakeCamera] = []

    def __init__(self, index, backend=None):
        self.index, self.backend, self.calls = index, backend, []
        self.properties = {cv2.CAP_PROP_FOURCC: cv2.VideoWriter_fourcc(*"MJPG"),
                           cv2.CAP_PROP_FPS: 30.0}
        self.left = 3
        FakeCamera.opened.append(self)

    def isOpened(self):  # noqa: N802 - OpenCV's name
        return True

    def set(self, prop, value):
        self.calls.append((prop, value))
        return True

    def get(self, prop):
        return self.properties.get(prop, 0.0)

    def read(self):
        if self.left == 0:
            return False, None
        self.left -= 1
        time.sleep(0.01)
        return True, np.zeros((6, 8, 3), np.uint8)

    def release(self):
        pass


def test_cameras_ask_for_mjpg_before_the_size_and_one_buffer(monkeypatch):
    FakeCamera.opened = []
    monkeypatch.setattr(cv2, "VideoCapture", FakeCamera)
    source = open_source("0", camera=CameraOptions(width=640, height=480), live=None)
    source.close()
    assert source.live and source.fps == 30.0
    (camera,) = FakeCamera.opened[:1]
    props = [prop for prop, _ in camera.calls]
    assert props[0] == cv2.CAP_PROP_FOURCC
    assert props.index(cv2.CAP_PROP_FOURCC) < props.index(cv2.CAP_PROP_FRAME_WIDTH)
    assert (cv2.CAP_PROP_BUFFERSIZE, 1) in camera.calls
    assert (cv2.CAP_PROP_FRAME_HEIGHT, 480) in camera.calls


def test_a_stream_that_never_comes_back_ends_with_source_lost(caplog):
    opened = []

    def opener():
        if opened:
            raise InputError("cannot open the stream 'fake'", reference="bad-source")
        opened.append(1)
        return _TwoFrames()

    source = LiveSource("fake", opener, reconnect=Reconnect(attempts=2, backoff_s=0.01,
                                                             max_backoff_s=0.02))
    frames = []
    with pytest.raises(InputError, match=r"lost the stream 'fake': 2 reconnect attempts failed"):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            frame = source.read(timeout=0.1)
            if frame is not None:
                frames.append(frame)
    source.close()
    assert len(frames) >= 1 and "reconnect attempt 2 failed" in caplog.text


class _TwoFrames:
    def __init__(self):
        self.left = 2

    def read(self):
        self.left -= 1
        return (self.left >= 0), np.zeros((4, 4, 3), np.uint8)

    def release(self):
        pass


def test_a_generated_camera_given_its_fps_stamps_each_frame_with_its_media_time():
    frames = [np.full((4, 4, 3), i, np.uint8) for i in range(5)]
    stamped = [f.pts for f in IterableSource(frames, fps=10.0, stride=2)]
    assert stamped == pytest.approx([0.0, 0.2, 0.4])  # index / fps, skipped frames counted
    assert [f.pts for f in IterableSource(frames)] == [None] * 5  # no rate: no media time
    with pytest.raises(InputError, match="fps must be a positive number"):
        IterableSource(frames, fps=0)
