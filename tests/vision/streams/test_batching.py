"""The batcher: one model run for frames of several streams, each stream gets its own rows back."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgefuse.acl.gears import OmGears
from edgefuse.errors import InputError
from edgefuse.runtime import open_session
from edgefuse.session import TensorSpec
from edgefuse.vision.streams.batching import Batcher, BatchPlan, plan_batches, run_cost

pytestmark = pytest.mark.ort


def doubling_model(batch: int | str) -> onnx.ModelProto:
    """y = 2x and s = sum(x) per row, with a batch dimension ``batch``."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"]),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, axes=[1])],
        "double", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [batch])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)


class Shapes:
    """A session's inputs and gears, without a model behind them."""

    def __init__(self, *shapes: tuple, gears: OmGears | None = None) -> None:
        self.inputs = tuple(TensorSpec(f"in{i}", shape, np.dtype(np.float32))
                            for i, shape in enumerate(shapes))
        self.gears = gears


@pytest.mark.parametrize(("session", "wanted", "expected"), [
    (Shapes(("N", 3)), 4, BatchPlan(4, None)),
    (Shapes((None, 3), (None, 2)), 3, BatchPlan(3, None)),
    (Shapes((1, 3, 8, 8)), 4, BatchPlan(1, None)),
    (Shapes((4, 3)), 2, BatchPlan(4, 4)),
    (Shapes(("N", 3), (1, 2)), 4, BatchPlan(1, None)),
    (Shapes((-1, 3), gears=OmGears("batch", (1, 2, 4))), 8, BatchPlan(4, None)),
    (Shapes((-1, 3), gears=OmGears("batch", (1, 2, 4))), 3, BatchPlan(3, None)),
    (Shapes((1, 3, -1, -1), gears=OmGears("hw", ((8, 8), (16, 16)))), 4, BatchPlan(1, None)),
])
def test_the_plan_follows_the_batch_dimension_and_the_gears(session, wanted, expected):
    plan = plan_batches(session, wanted)
    assert (plan.max_batch, plan.pad_to) == (expected.max_batch, expected.pad_to)


def row(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 3), value, np.float32)}


class Gate:
    """A run function that records each batch it was given and holds the first one until
    ``release``: the requests made meanwhile pile up and must form the next batch."""

    def __init__(self, run) -> None:
        self.run, self.batches = run, []
        self.entered, self.released = threading.Event(), threading.Event()

    def __call__(self, feeds):
        self.batches.append(feeds["x"][:, 0].tolist())
        if len(self.batches) == 1:
            self.entered.set()
            self.released.wait(10)
        return self.run(feeds)


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.005)


def submit(batcher: Batcher, values, results: dict) -> list[threading.Thread]:
    threads = [threading.Thread(target=lambda v=v: results.__setitem__(v, batcher.infer(row(v))))
               for v in values]
    for thread in threads:
        thread.start()
    return threads


def test_requests_waiting_while_the_model_runs_form_the_next_batch_and_get_their_own_rows():
    with open_session(doubling_model("N"), "cpu") as session:
        gate = Gate(session.run)
        batcher = Batcher(gate, plan_batches(session, 4))
        results: dict[float, dict] = {}
        first = submit(batcher, [1.0], results)
        assert gate.entered.wait(10)
        rest = submit(batcher, [2.0, 3.0, 4.0, 5.0, 6.0], results)
        wait_for(lambda: len(batcher._pending) == 5)
        gate.released.set()
        for thread in first + rest:
            thread.join(10)
        batcher.close()
    assert [sorted(b) for b in gate.batches] == [[1.0], [2.0, 3.0, 4.0, 5.0], [6.0]]
    for value, outputs in results.items():  # each request's rows, not a neighbour's
        np.testing.assert_array_equal(outputs["y"], np.full((1, 3), 2 * value, np.float32))
        np.testing.assert_array_equal(outputs["s"], np.array([3 * value], np.float32))
    assert batcher.sizes == {1: 2, 4: 1}


def test_a_fixed_batch_model_gets_partial_batches_padded_and_the_padding_cut_off():
    with open_session(doubling_model(4), "cpu") as session:
        gate = Gate(session.run)
        batcher = Batcher(gate, plan_batches(session, 2))
        results: dict[float, dict] = {}
        threads = submit(batcher, [7.0], results)
        assert gate.entered.wait(10)
        threads += submit(batcher, [8.0, 9.0], results)
        wait_for(lambda: len(batcher._pending) == 2)
        gate.released.set()
        for thread in threads:
            thread.join(10)
        batcher.close()
    assert gate.batches == [[7.0] * 4, [8.0, 9.0, 9.0, 9.0]]  # padded with the last frame
    assert {v: float(r["s"][0]) for v, r in results.items()} == {7.0: 21.0, 8.0: 24.0, 9.0: 27.0}
    assert all(r["y"].shape == (1, 3) for r in results.values())


def test_with_a_wait_a_batch_runs_once_every_stream_has_a_frame_in():
    with open_session(doubling_model("N"), "cpu") as session:
        gate = Gate(session.run)
        gate.released.set()
        batcher = Batcher(gate, plan_batches(session, 8), wait_s=30.0, streams=3)
        results: dict[float, dict] = {}
        threads = submit(batcher, [1.0, 2.0], results)
        wait_for(lambda: len(batcher._pending) == 2)
        assert gate.batches == []  # two of three streams: still waiting (deadline 30 s)
        threads += submit(batcher, [3.0], results)
        for thread in threads:
            thread.join(10)
        batcher.close()
    assert [sorted(b) for b in gate.batches] == [[1.0, 2.0, 3.0]]


def test_a_model_whose_outputs_do_not_split_by_frame_is_refused_before_the_run():
    def whole_batch_sum(feeds):
        return {"total": np.array([feeds["x"].sum()], np.float32)}

    batcher = Batcher(whole_batch_sum, BatchPlan(4))
    with pytest.raises(InputError, match=r"(?s)cannot batch this model: output 'total' has shape "
                                         r"\[1\] for a batch of 4.*batch: 1"):
        batcher.rehearse(row(1.0))
    batcher.close()


def test_a_failed_batch_fails_every_stream_in_it_and_the_batcher_goes_on():
    calls = []

    def flaky(feeds):
        calls.append(len(feeds["x"]))
        if len(calls) == 1:
            raise RuntimeError("device fault")
        return {"y": feeds["x"] * 2}

    batcher = Batcher(flaky, BatchPlan(2))
    with pytest.raises(RuntimeError, match="device fault"):
        batcher.infer(row(1.0))
    np.testing.assert_array_equal(batcher.infer(row(2.0))["y"], np.full((1, 3), 4.0, np.float32))
    batcher.close()
    assert not any(t.name == "edgefuse-batcher" for t in threading.enumerate())


def test_a_batch_one_model_runs_each_stream_in_its_own_thread_without_a_batcher_thread():
    batcher = Batcher(lambda feeds: {"y": feeds["x"] + 1}, BatchPlan(1))
    assert not any(t.name == "edgefuse-batcher" for t in threading.enumerate())
    np.testing.assert_array_equal(batcher.infer(row(1.0))["y"], np.full((1, 3), 2.0, np.float32))
    assert batcher.sizes == {1: 1}
    batcher.close()


@pytest.mark.parametrize("wanted", [0, -2])
def test_a_batch_below_one_is_a_config_error(wanted):
    with pytest.raises(InputError, match="batch must be at least 1"):
        plan_batches(Shapes(("N", 3)), wanted)


@pytest.mark.parametrize(("runs", "expected"), [
    ([(1, 0.014), (3, 0.034), (2, 0.024)], 0.004),  # a launch cost per run (an NPU): wait it
    ([(1, 0.001), (3, 0.003), (2, 0.002)], 0.0),  # time grows with rows alone (a CPU): never
    ([(1, 0.050), (2, 0.051)], 0.02525),  # fixed cost above half a median run: half a run
    ([], 0.0),  # nothing measured: no wait
])
def test_by_default_a_batch_waits_up_to_the_models_fixed_cost_per_run(runs, expected):
    batcher = Batcher(lambda feeds: {"y": feeds["x"]}, BatchPlan(4))
    batcher._runs.extend(runs)
    assert batcher._deadline_s() == pytest.approx(expected, abs=1e-9)
    batcher.close()
    greedy = Batcher(lambda feeds: {"y": feeds["x"]}, BatchPlan(4), wait_s=0.0)
    greedy._runs.extend(runs)
    assert greedy._deadline_s() == 0.0
    greedy.close()


@pytest.mark.parametrize(("runs", "expected"), [
    ([(1, 0.005), (2, 0.006), (4, 0.008)], (0.004, 0.001)),
    ([(1, 0.003), (2, 0.006), (8, 0.024)], (0.0, 0.003)),
    ([(2, 0.010), (2, 0.012)], (0.0, 0.0)),  # one size: nothing to fit
    ([(1, 0.010), (2, 0.008)], (0.012, 0.0)),  # faster with more rows: no negative cost
])
def test_run_cost_is_the_fixed_and_per_row_time_of_the_runs(runs, expected):
    assert run_cost(runs) == pytest.approx(expected, abs=1e-9)


def test_a_stream_that_ended_is_no_longer_waited_for():
    """Three streams, a 30 s deadline: once two have ended, the last stream's frame is a full
    batch and runs at once (a dead camera must not hold the others to the deadline)."""
    with open_session(doubling_model("N"), "cpu") as session:
        gate = Gate(session.run)
        gate.released.set()
        batcher = Batcher(gate, plan_batches(session, 8), wait_s=30.0, streams=3)
        batcher.stream_ended()
        batcher.stream_ended()
        results: dict[float, dict] = {}
        started = time.monotonic()
        (thread,) = submit(batcher, [5.0], results)
        thread.join(10)
        batcher.close()
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert gate.batches == [[5.0]]
    assert float(results[5.0]["s"][0]) == 15.0
