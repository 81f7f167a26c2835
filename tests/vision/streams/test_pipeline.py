"""The threaded pipeline: order, no lost frame, every way to stop ends cleanly, sinks' files."""

from __future__ import annotations

import json
import signal
import threading
import time

import numpy as np
import pytest

from edgefuse.vision.streams.pipeline import STAGES, Pipeline
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


@pytest.fixture
def terminal_sigint():
    """SIGINT handled as a terminal's Ctrl-C reaches Python: its own handler. A test run started
    in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, which
    Python and the pipeline (rightly) keep, and these tests would test nothing but the shell."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def ctrl_c() -> None:
    """A real SIGINT to the main thread, as a terminal's Ctrl-C: it interrupts the main thread
    inside a blocking wait (``_thread.interrupt_main`` only raises at the next bytecode)."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


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


class SlowSink(Sink):
    """Slower than every other stage, so frames queue up in front of it when a stop comes;
    counts its closes and any write after a close."""

    needs_image = True  # so annotate, the "sink" stage's interrupt point, runs

    def __init__(self) -> None:
        self.written: list[int] = []
        self.closed = 0
        self.writes_after_close = 0

    def write(self, result, image):
        if self.closed:
            self.writes_after_close += 1
        time.sleep(0.01)
        self.written.append(result.index)

    def close(self):
        self.closed += 1


class CtrlCTask(EchoTask):
    """Raises Ctrl-C in the main thread from inside ``stage`` when frame ``at`` gets there."""

    def __init__(self, stage: str, at: int) -> None:
        super().__init__(delay=0.001)
        self.stage, self.at = stage, at

    def _maybe_interrupt(self, stage: str, index: int) -> None:
        if stage == self.stage and index == self.at:
            ctrl_c()

    def preprocess(self, image):
        self._maybe_interrupt("preprocess", int(image[0, 0, 0]))
        return super().preprocess(image)

    def infer(self, feeds):
        self._maybe_interrupt("infer", int(feeds["x"][0, 0, 0]))
        return super().infer(feeds)

    def postprocess(self, outputs, geometry):
        self._maybe_interrupt("postprocess", int(outputs["y"][0, 0, 0]))
        return super().postprocess(outputs, geometry)

    def annotate(self, image, result):
        self._maybe_interrupt("sink", result)
        return image


def stop_at(pipeline, index: int, reason: str) -> CallbackSink:
    """A sink that calls ``pipeline.stop(reason)`` once frame ``index`` reached it."""

    def check(result):
        if result.index == index:
            pipeline.stop(reason)
        return True

    return CallbackSink(check)


def interrupting_frames(count: int, at: int | None):
    for index, frame in enumerate(numbered_frames(count)):
        if index == at:
            ctrl_c()
        yield frame


def assert_stopped_cleanly(pipeline, summary, sink):
    assert summary.reason == "interrupted" and not summary.aborted
    assert sink.written == list(range(pipeline._read))  # every frame read was written, in order
    assert 0 < pipeline._read
    assert pipeline_threads() == []
    assert sink.closed == 1 and sink.writes_after_close == 0


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.usefixtures("terminal_sigint")
def test_ctrl_c_from_inside_a_stage_finishes_the_frames_in_flight(stage):
    sink = SlowSink()
    at = 8
    source = open_source(interrupting_frames(200, at if stage == "capture" else None))
    pipeline = Pipeline(source, CtrlCTask(stage, at), [sink], report_every=None)
    summary = pipeline.run()
    assert_stopped_cleanly(pipeline, summary, sink)
    assert pipeline._read < 200


class CtrlCWhileWaitedOn(EchoTask):
    """Once the run is stopping, ``stage`` (on its next frame) waits until every stage before it
    has ended, then sends Ctrl-C and goes on with its frames: the main thread is then waiting on
    this very thread (Python 3.11's ``Thread.join`` marks a thread it was joining as stopped when
    a Ctrl-C lands in it, which ended the old wait with frames still in the sink)."""

    def __init__(self, stage: str) -> None:
        super().__init__(delay=0.001)
        self.stage = stage
        self.pipeline: Pipeline | None = None
        self.sent = False

    def _hook(self, stage: str) -> None:
        if stage != self.stage or self.sent or not self.pipeline.stopping:
            return
        before = {f"edgefuse-{name}" for name in STAGES[:STAGES.index(stage)]}
        assert wait_until(lambda: not before & set(pipeline_threads()))
        self.sent = True
        ctrl_c()

    def preprocess(self, image):
        self._hook("preprocess")
        return super().preprocess(image)

    def infer(self, feeds):
        self._hook("infer")
        return super().infer(feeds)

    def postprocess(self, outputs, geometry):
        self._hook("postprocess")
        return super().postprocess(outputs, geometry)

    def annotate(self, image, result):
        self._hook("sink")
        return image


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.usefixtures("terminal_sigint")
def test_ctrl_c_while_waiting_on_each_thread_still_finishes_every_frame(stage):
    sink = SlowSink()
    task = CtrlCWhileWaitedOn(stage)

    def frames():  # frame 8 stops the run: a Ctrl-C for the capture case, else a plain stop
        for index, frame in enumerate(numbered_frames(200)):
            if index == 8:
                ctrl_c() if stage == "capture" else task.pipeline.stop("interrupted")
            yield frame

    # Queues deep enough for every frame in flight: the stages before `stage` end while it
    # still holds frames.
    task.pipeline = Pipeline(open_source(frames()), task, [sink], queue_size=64,
                             report_every=None)
    summary = task.pipeline.run()
    assert_stopped_cleanly(task.pipeline, summary, sink)
    assert task.sent or stage == "capture"


@pytest.mark.usefixtures("terminal_sigint")
def test_a_second_ctrl_c_aborts_and_still_closes_every_sink_once():
    sink = SlowSink()
    seconds = []

    def second_ctrl_c(result):
        if pipeline.stopping and not seconds:  # the first Ctrl-C was taken: send the second
            seconds.append(result.index)
            ctrl_c()
            assert pipeline._abort.wait(10)  # taken: no later frame reaches a sink
        return True

    pipeline = Pipeline(open_source(interrupting_frames(200, 8)), EchoTask(delay=0.001),
                        [CallbackSink(second_ctrl_c), sink], report_every=None)
    summary = pipeline.run()
    assert summary.reason == "interrupted" and summary.aborted and seconds
    assert sink.written == list(range(len(sink.written)))  # what was written is whole
    assert sink.written[-1] == seconds[0] < pipeline._read - 1  # the frames in flight dropped
    assert pipeline_threads() == []
    assert sink.closed == 1 and sink.writes_after_close == 0


def test_stop_from_a_sink_finishes_the_frames_already_read():
    results = []
    pipeline = Pipeline(open_source(numbered_frames(500)), EchoTask(delay=0.001),
                        [collect(results)])
    pipeline.sinks.append(stop_at(pipeline, 10, "stopped"))
    summary = pipeline.run()
    assert summary.reason == "stopped" and 10 < len(results) < 500
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
        assert isinstance(record["time"], float) and record["size"] == {"width": 64, "height": 48}
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
