"""The threaded pipeline: order, no lost frame, every way to stop ends cleanly, sinks' files."""

from __future__ import annotations

import _thread
import json
import threading
import time

import numpy as np
import pytest

from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import (
    FRAME_SCHEMA,
    CallbackSink,
    ImageFolderSink,
    JsonlSink,
    Sink,
    VideoSink,
)
from edgefuse.vision.streams.sources import open_source
from tests.needs import optional
from tests.vision.models import write_clip

pytestmark = pytest.mark.ort

cv2 = optional("cv2")


class EchoTask:
    """Each stage waits a random few milliseconds; the result is the frame's first pixel."""

    def __init__(self, seed: int = 0, fail_at: int | None = None, delay: float = 0.004) -> None:
        self.rng = np.random.default_rng(seed)
        self.fail_at = fail_at
        self.delay = delay

    def _nap(self) -> None:
        time.sleep(float(self.rng.uniform(0, self.delay)))

    def preprocess(self, image):
        self._nap()
        return {"x": image[:1, :1].copy()}, None

    def infer(self, feeds):
        self._nap()
        return {"y": feeds["x"]}

    def postprocess(self, outputs, geometry):
        self._nap()
        value = int(outputs["y"][0, 0, 0])
        if value == self.fail_at:
            raise ValueError(f"stage failed on {value}")
        return value

    def annotate(self, image, result):
        return image

    def describe(self, result):
        return {"value": result}


def numbered_frames(count: int) -> list[np.ndarray]:
    return [np.full((6, 8, 3), i % 256, np.uint8) for i in range(count)]


def pipeline_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("edgefuse-")]


def collect(results):
    return CallbackSink(lambda result: results.append((result.index, result.result)))


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_file_source_loses_no_frame_and_keeps_the_order(concurrent):
    results = []
    summary = Pipeline(open_source(numbered_frames(60)), EchoTask(), [collect(results)],
                       queue_size=2).run(concurrent=concurrent)
    assert summary.reason == "end" and summary.stats.frames == 60
    assert results == [(i, i) for i in range(60)]
    assert set(summary.stats.totals) == {"capture", "preprocess", "infer", "postprocess", "sink",
                                         "latency"}
    assert pipeline_threads() == []


def test_max_frames_stops_reading():
    results = []
    summary = Pipeline(open_source(numbered_frames(30)), EchoTask(), [collect(results)],
                       max_frames=7).run()
    assert summary.reason == "max_frames" and [i for i, _ in results] == list(range(7))


class RecordingSink(Sink):
    def __init__(self) -> None:
        self.closed = 0

    def write(self, result, image):
        pass

    def close(self):
        self.closed += 1


def test_a_failing_stage_stops_every_thread_closes_the_sinks_and_raises():
    sink = RecordingSink()
    pipeline = Pipeline(open_source(numbered_frames(100)), EchoTask(fail_at=5), [sink])
    with pytest.raises(ValueError, match="stage failed on 5"):
        pipeline.run()
    assert sink.closed == 1 and pipeline.source.finished
    assert pipeline_threads() == []


def test_a_closed_sink_stops_the_pipeline_cleanly():
    seen = []

    def until_three(result):
        seen.append(result.index)
        return result.index < 3

    summary = Pipeline(open_source(numbered_frames(100)), EchoTask(), [CallbackSink(until_three)],
                       queue_size=1).run()
    assert summary.reason == "sink_closed" and seen == [0, 1, 2, 3]
    assert summary.stats.counters["sink_closed"] == 1
    assert pipeline_threads() == []


def test_ctrl_c_finishes_the_frames_in_flight_and_summarises():
    results = []
    pipeline = Pipeline(open_source(numbered_frames(500)), EchoTask(delay=0.02),
                        [collect(results)])
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        summary = pipeline.run()
    finally:
        timer.cancel()
    assert summary.reason == "interrupted"
    assert 0 < len(results) < 500
    assert [i for i, _ in results] == list(range(len(results)))  # every frame read was written
    assert pipeline._read == len(results)
    assert pipeline_threads() == []


def test_stop_from_another_thread():
    results = []
    pipeline = Pipeline(open_source(numbered_frames(500)), EchoTask(delay=0.01),
                        [collect(results)])
    threading.Timer(0.2, pipeline.stop).start()
    summary = pipeline.run()
    assert summary.reason == "stopped" and 0 < len(results) < 500
    assert len(results) == pipeline._read


def test_periodic_reports_reach_the_callback():
    lines = []
    Pipeline(open_source(numbered_frames(20)), EchoTask(), report_every=0.0,
             report=lambda snapshot: lines.append(snapshot.line())).run()
    assert len(lines) == 20 and lines[-1].startswith("20 frames")


def test_jsonl_video_and_image_sinks(tmp_path):
    decoded = write_clip(tmp_path / "clip.mp4", frames=10, fps=10)
    sinks = [JsonlSink(tmp_path / "out.jsonl"), VideoSink(tmp_path / "out.mp4"),
             ImageFolderSink(tmp_path / "images")]
    Pipeline(open_source(tmp_path / "clip.mp4"), EchoTask(), sinks).run()
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["frame"] for r in records] == list(range(10))
    for record in records:
        assert set(FRAME_SCHEMA) <= set(record) and "value" in record
        assert isinstance(record["time"], float) and record["size"] == [48, 64]
        assert set(record["timings_ms"]) == {"capture", "preprocess", "infer", "postprocess"}
        after_capture = sum(v for k, v in record["timings_ms"].items() if k != "capture")
        assert record["latency_ms"] >= after_capture - 1e-3  # from the decoded frame on
    assert records[3]["pts"] == pytest.approx(0.3)
    assert records[4]["value"] == int(decoded[4][0, 0, 0])
    capture = cv2.VideoCapture(str(tmp_path / "out.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 10
    capture.release()
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == [
        f"{i:06d}.jpg" for i in range(10)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_files_appear_only_when_the_sink_closes(tmp_path):
    sink = JsonlSink(tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
    sink.close()
    assert (tmp_path / "out.jsonl").read_text() == ""
