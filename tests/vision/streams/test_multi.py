"""Many streams, one batched model: each stream's results are its own, in order; losses and
failures end the run the way the module says."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edgefuse.errors import InputError, Ref
from edgefuse.vision.streams.batching import Batcher, BatchPlan
from edgefuse.vision.streams.multi import (
    MultiPipeline,
    MultiSummary,
    Stream,
    check_stream_names,
)
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import Source, open_source
from tests.vision.streams.test_pipeline import pipeline_threads

pytestmark = pytest.mark.unit


class ValueTask:
    """The result of a frame is its first pixel, through a model that doubles it."""

    def preprocess(self, image):
        return {"x": image[:1, :1, 0].astype(np.float32)}, None

    def infer(self, feeds):
        raise AssertionError("the batcher runs the model, not the task")

    def postprocess(self, outputs, geometry):
        return int(outputs["y"][0, 0]) // 2

    def annotate(self, image, result):
        return image

    def describe(self, result):
        return {"value": result}


def frames(base: int, count: int) -> list[np.ndarray]:
    return [np.full((4, 4, 3), (base + i) % 256, np.uint8) for i in range(count)]


def doubled(feeds):
    return {"y": feeds["x"] * 2}


def run_streams(lengths: dict[str, tuple[int, int]], batcher: Batcher, **options):
    results: dict[str, list] = {name: [] for name in lengths}
    streams = [Stream(name, open_source(frames(base, count)), ValueTask(),
                      [CallbackSink(lambda r, n=name: results[n].append((r.index, r.result)))])
               for name, (base, count) in lengths.items()]
    summary = MultiPipeline(streams, batcher=batcher, **options).run()
    return summary, results


def test_every_batch_holds_one_frame_of_each_stream_and_each_gets_its_own_back_in_order():
    batcher = Batcher(doubled, BatchPlan(8), wait_s=30.0, streams=3)
    summary, results = run_streams({"a": (0, 20), "b": (100, 20), "c": (200, 20)}, batcher)
    batcher.close()
    for name, base in (("a", 0), ("b", 100), ("c", 200)):
        assert results[name] == [(i, base + i) for i in range(20)], name
        assert summary.streams[name].reason == "end"
    assert batcher.sizes == {3: 20}  # every run had all three cameras' frames
    assert pipeline_threads() == []


def test_a_stream_that_ends_early_stops_holding_the_others_back():
    batcher = Batcher(doubled, BatchPlan(8), wait_s=30.0, streams=2)
    summary, results = run_streams({"short": (0, 3), "long": (50, 12)}, batcher)
    batcher.close()
    assert results["long"] == [(i, 50 + i) for i in range(12)]
    assert batcher.sizes == {2: 3, 1: 9}
    assert summary.reason == "end"


def test_a_stream_that_ended_is_not_waited_for_until_the_deadline():
    """With a 30 s deadline, the 9 frames the long stream reads alone would take 270 s if the
    batcher still waited for the ended one; the run takes milliseconds (20 s is the bound)."""
    batcher = Batcher(doubled, BatchPlan(8), wait_s=30.0, streams=2)
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(
        done=run_streams({"short": (0, 1), "long": (50, 10)}, batcher)))
    runner.start()
    runner.join(20)
    finished = not runner.is_alive()
    batcher.close()  # a batch still waiting fails now, which ends the run either way
    runner.join(20)
    assert finished, "the long stream waited for the stream that had ended"
    assert outcome["done"][1]["long"] == [(i, 50 + i) for i in range(10)]


class LostSource(Source):
    """A live stream whose reconnect attempts all failed."""

    live = True

    def __init__(self) -> None:
        super().__init__("lost")

    def read(self, timeout=None):
        raise InputError("lost the stream 'cam1': 10 reconnect attempts failed",
                         reference=Ref.SOURCE_LOST)


def test_a_lost_stream_is_reported_and_the_others_go_on():
    results, lost = [], []
    streams = [Stream("cam0", open_source(frames(0, 10)), ValueTask(),
                      [CallbackSink(lambda r: results.append(r.result))]),
               Stream("cam1", LostSource(), ValueTask())]
    batcher = Batcher(doubled, BatchPlan(2))
    summary = MultiPipeline(streams, batcher=batcher,
                            on_lost=lambda name, error: lost.append(name)).run()
    batcher.close()
    assert results == list(range(10)) and lost == ["cam1"]
    assert list(summary.lost) == ["cam1"] and "10 reconnect attempts" in summary.lost["cam1"]
    assert list(summary.streams) == ["cam0"]


def test_when_every_stream_is_lost_the_run_fails_with_the_loss():
    streams = [Stream(f"cam{i}", LostSource(), ValueTask()) for i in range(2)]
    batcher = Batcher(doubled, BatchPlan(2))
    with pytest.raises(InputError, match="reconnect attempts failed"):
        MultiPipeline(streams, batcher=batcher).run()
    batcher.close()


def test_a_model_failure_stops_every_stream_and_is_raised():
    def broken(feeds):
        raise RuntimeError("the NPU faulted")

    endless = [Stream(f"cam{i}", open_source(frames(i * 10, 10_000)), ValueTask())
               for i in range(3)]
    batcher = Batcher(broken, BatchPlan(4))
    with pytest.raises(RuntimeError, match="the NPU faulted"):
        MultiPipeline(endless, batcher=batcher).run()
    batcher.close()
    assert pipeline_threads() == []


def test_stop_reaches_every_stream():
    started = threading.Event()
    streams = [Stream(f"cam{i}", open_source(frames(0, 100_000)), ValueTask(),
                      [CallbackSink(lambda r: started.set())]) for i in range(2)]
    batcher = Batcher(doubled, BatchPlan(2))
    multi = MultiPipeline(streams, batcher=batcher)
    threading.Thread(target=lambda: started.wait(10) and multi.stop("stopped")).start()
    summary = multi.run()
    batcher.close()
    assert summary.reason == "stopped"
    assert all(s.reason == "stopped" for s in summary.streams.values())
    assert multi.first_frame.is_set() and multi.frames_done > 0


@pytest.mark.parametrize(("names", "message"), [
    (["cam", "cam"], "two streams are named 'cam'"),
    (["cam", "a/b"], "stream name 'a/b' cannot be used"),
    (["", "x"], "stream name '' cannot be used"),
    (["door+1"], "stream name 'door\\+1' cannot be used"),
])
def test_stream_names_are_unique_and_safe_in_paths_and_topics(names, message):
    with pytest.raises(InputError, match=message):
        check_stream_names(names)


def test_one_stream_runs_in_the_calling_thread_and_an_interrupt_after_the_end_still_counts():
    """One stream runs where ``run`` was called (a Ctrl-C lands in its own wait, as with a
    Pipeline alone); an interrupt asked for once every stream ended still makes the summary's
    reason ``interrupted`` (a Ctrl-C exits 130 whenever it came)."""
    ran_in: list[threading.Thread] = []

    class Recording(ValueTask):
        def postprocess(self, outputs, geometry):
            ran_in.append(threading.current_thread())
            return super().postprocess(outputs, geometry)

    batcher = Batcher(doubled, BatchPlan(1))
    multi = MultiPipeline([Stream("only", open_source(frames(0, 3)), Recording())],
                          batcher=batcher)
    summary = multi.run(concurrent=False)
    batcher.close()
    assert set(ran_in) == {threading.current_thread()} and summary.reason == "end"
    late = MultiSummary(summary.streams, {}, interrupted="interrupted")
    assert late.reason == "interrupted"
