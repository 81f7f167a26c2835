"""What the sinks leave behind has the mode a plain ``open`` gives (0666 less the umask), not the
0600 of the temporary file it was staged in, so videos, JSON Lines and images are shared as every
other tool's outputs are."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from edgefuse.vision.streams.frames import Frame, FrameResult
from edgefuse.vision.streams.sinks import ImageFolderSink, JsonlSink, VideoSink
from tests.needs import optional

pytestmark = pytest.mark.unit

optional("cv2")


def _result(index: int) -> FrameResult:
    image = np.full((32, 48, 3), 40 * index, np.uint8)
    return FrameResult(Frame(index, image, time.time(), time.perf_counter(), name=f"f{index}.png"),
                       result=index)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_jsonl_video_and_images_get_the_mode_the_umask_gives(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        sinks = [JsonlSink(tmp_path / "frames.jsonl"), VideoSink(tmp_path / "frames.avi"),
                 ImageFolderSink(tmp_path / "images", suffix=".png")]
        for sink in sinks:
            sink.start(fps=10.0, describe=lambda result: {"value": result})
        for index in range(3):
            result = _result(index)
            for sink in sinks:
                sink.write(result, result.frame.image)
        for sink in sinks:
            sink.close()
    finally:
        os.umask(old)
    written = [tmp_path / "frames.jsonl", tmp_path / "frames.avi",
               *(tmp_path / "images" / f"f{i}.png" for i in range(3))]
    assert {path.name: path.stat().st_mode & 0o777 for path in written} == {
        path.name: mode for path in written}
    assert len((tmp_path / "frames.jsonl").read_text().splitlines()) == 3
