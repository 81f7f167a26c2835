"""Every kind of video edgefuse writes plays in headless Chromium: ``readyState >= 2`` and
``currentTime`` advancing, served over HTTP as a dashboard or a file server would serve it.

Why a browser and not a decoder: the MPEG-4 Part 2 files written before PyAV were read by
OpenCV and ffprobe without complaint and left Chromium at ``readyState`` 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.vision.media.h264 import h264_available
from edgefuse.vision.media.video_file import write_video
from edgefuse.vision.scenes.shapes import SceneGenerator
from edgefuse.vision.streams.frames import Frame, FrameResult
from edgefuse.vision.streams.sinks import VideoSink
from tests.browser import chromium, play, served_folder
from tests.needs import optional

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def browser():
    optional("av")
    driver = chromium()
    yield driver
    driver.quit()


def _frames(count: int, width: int = 320, height: int = 240) -> list[np.ndarray]:
    generator = SceneGenerator(seed=3, size=(height, width))
    return [scene.image for scene in generator.clip(0, frames=count, fps=15.0)]


def _plays(browser, folder, name, width, height):
    with served_folder(folder) as url:
        state = play(browser, url, name)
    assert state["why"] == "playing", state
    assert state["readyState"] >= 2 and state["currentTime"] > 0, state
    assert (state["width"], state["height"]) == (width, height), state


def test_h264_is_what_writes_mp4_here():
    optional("av")
    assert h264_available()


def test_the_check_fails_on_opencvs_mpeg4_part2(browser, tmp_path):
    """The check can go red: what OpenCV writes into an MP4 does not play."""
    cv2 = optional("cv2")
    writer = cv2.VideoWriter(str(tmp_path / "mp4v.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 15.0,
                             (320, 240))
    for image in _frames(30):
        writer.write(image)
    writer.release()
    with served_folder(tmp_path) as url:
        state = play(browser, url, "mp4v.mp4")
    assert state["why"] == "error" and state["readyState"] == 0, state


def test_write_video_plays(browser, tmp_path):
    write_video(tmp_path / "clip.mp4", _frames(45), fps=15.0)
    _plays(browser, tmp_path, "clip.mp4", 320, 240)


def test_an_odd_sized_frame_plays_one_pixel_smaller(browser, tmp_path):
    write_video(tmp_path / "odd.mp4", _frames(30, 321, 241), fps=15.0)
    _plays(browser, tmp_path, "odd.mp4", 320, 240)


def test_save_and_live_segments_play(browser, tmp_path):
    """``--save`` of a file source (timed by its pts) and a live source's segments."""
    frames = _frames(60)
    whole = VideoSink(tmp_path / "save.mp4")
    live = VideoSink(tmp_path / "live.mp4", segment_s=2.0)
    for sink in (whole, live):
        sink.start(fps=20.0, describe=lambda _: {})
    for index, image in enumerate(frames):
        at = 1_800_000_000.0 + index / 20
        whole.write(FrameResult(Frame(index, image, at, 0.0, pts=index / 20)), image)
        live.write(FrameResult(Frame(index, image, at, index / 20)), image)
    whole.close()
    live.close()
    assert len(live.segments) == 2
    _plays(browser, tmp_path, "save.mp4", 320, 240)
    for segment in live.segments:
        _plays(browser, tmp_path, segment.name, 320, 240)
