"""bench.multistream's core at tiny size: two cameras on 127.0.0.1 whose send times come back
through shared memory, a stand-in that batches, and two streams run batched to a frame count."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench import multistream
from edgefuse.testing.mjpeg import decode_number
from tests.needs import optional

pytestmark = [pytest.mark.slow, pytest.mark.torch]
optional("torch")
optional("cv2")


@pytest.fixture(scope="module")
def dynamic_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "dynamic-batch.onnx"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(multistream, "DYNAMIC", path)
        multistream.export_dynamic_batch()
        yield path


def test_the_stand_in_returns_the_models_row_for_every_row():
    outputs = {"output0": np.arange(20, dtype=np.float32).reshape(1, 2, 10)}
    got = multistream.BatchStandIn(outputs, a_ms=0.0, b_ms=0.0).run(
        {"images": np.zeros((3, 3, 4, 4), np.float32)})
    assert got["output0"].shape == (3, 2, 10)
    assert all(np.array_equal(row, outputs["output0"][0]) for row in got["output0"])


def test_each_cameras_send_times_reach_the_measuring_process():
    import cv2

    cameras = multistream.Cameras(2, fps=50.0)
    try:
        for stream, url in enumerate(cameras.urls):
            capture = cv2.VideoCapture(url)
            ok, frame = capture.read()
            capture.release()
            assert ok
            number = decode_number(frame)
            assert 0 < cameras.sent_at(stream, number) <= time.perf_counter()
        assert cameras.offered(0.0, time.perf_counter()) >= 2
    finally:
        cameras.close()


def test_two_streams_run_batched_to_the_frame_count(dynamic_model):
    setup = multistream.Setup(2, "stand-in", threads=1, fps=50.0, stand_in=(0.0, 1.0))
    result = multistream.soak(setup, frames=60)
    assert (result["frames"], result["first"]) == (60, 6)
    assert [done for done, _ in result["samples"]] == [6, 60]
    assert result["rss_mb_first"] > 0 and result["rss_mb_end"] > 0
