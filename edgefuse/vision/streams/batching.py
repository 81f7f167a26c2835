"""One model session serving many streams: frames from different cameras run as one batch.

Why a batcher thread and not a batch stage in each pipeline (DeepStream's nvstreammux batches
before inference; Triton's dynamic batcher queues requests): every stream keeps its own
pipeline (its own capture, pre/post-processing, tracker, sinks, stats and reconnects), and only
the model is shared. Each stream's infer stage hands its feeds to ``Batcher.infer`` and waits;
the batcher thread takes the requests that are waiting (up to the largest batch), runs them as one
batch and hands each stream its own rows back, so results are demultiplexed by construction: a
request gets the rows it put in.

When a batch runs: once every live stream has a frame in (each stream's infer stage has at most
one request out, so that is a full batch), or at a deadline, or as soon as the model is free when
the deadline is 0 (``wait_s=0``, greedy). The deadline counts from the batch's first request, or
from the end of the model's last run when that request came during it (otherwise two streams
fall into turns, one running while the other's frame waits, and never batch). The default
deadline (``wait_s=None``) is the model's fixed cost per run (``run_cost``: the intercept of run
time against rows, fitted to the recent runs), at most half a median run. That is the
break-even: a frame that misses the batch costs the model one more run's fixed cost later. A model
whose time grows with rows alone (ONNX Runtime on a CPU) gains nothing from a batch and does not
wait; one with a launch cost per run (an NPU) waits up to that cost; a camera later than that runs
in the next batch, so a slow or dead camera never stalls the others. (Exempting a frame that
finds the model idle was tried and measured worse: under load the first stream back after a batch
always found the model idle, ran alone, and split every batch into 1 + the rest.)

Why not greedy under load: bench/multistream.py measured it, and batches do not fill by
themselves: while one batch runs, the streams of the previous one are still post-processing, so
runs alternate between a lone frame and the rest (sizes 1, 3, 1, 3 at 4 cameras; two cameras take
turns and never batch), which costs latency and, where a batch costs less than its frames alone
(an NPU), throughput.

Which batch sizes (``plan_batches``): a model whose batch dimension is dynamic takes any size up
to ``max_batch``; a gear OM (a BUILD_DIR with ``--dynamic_batch_size`` gears, on ``acl`` or
``sim``) takes up to its largest gear, and the session itself runs a partial batch on the next
larger gear and cuts the outputs back; a model fixed at batch B > 1 is padded here (the last frame
repeated) and its outputs cut back; a model fixed at batch 1 is not batched (each stream calls the
session from its own thread, as a single-stream pipeline does).
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.errors import EdgefuseError, InputError, Ref

RECENT_RUNS = 32  # model runs the default deadline is fitted to
Run = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """The batch sizes a model takes: ``max_batch`` rows at most; ``pad_to`` a fixed batch that
    partial batches are padded to here (None: the model or its session takes any size)."""

    max_batch: int
    pad_to: int | None = None
    why: str = ""

    @property
    def batches(self) -> bool:
        return self.max_batch > 1


def plan_batches(session: Any, wanted: int) -> BatchPlan:
    """How ``session`` can batch up to ``wanted`` frames (the number of streams, or a config's
    ``batch``): from its gears, else from its inputs' first dimension."""
    if wanted < 1:
        raise InputError(f"batch must be at least 1, got {wanted}", reference=Ref.BAD_CONFIG)
    gears = getattr(session, "gears", None)
    if gears is not None and gears.kind == "batch":
        largest = max(gears.values)
        return BatchPlan(min(wanted, largest), None,
                         f"batch gears {list(gears.values)}: a partial batch runs on the next "
                         "larger gear")
    if gears is not None:
        return BatchPlan(1, None, f"{gears.kind} gears fix the batch at 1")
    firsts = {spec.shape[0] if spec.shape else 1 for spec in session.inputs}
    if any(not isinstance(first, int) for first in firsts):
        if len(firsts) == 1:
            return BatchPlan(wanted, None, "dynamic batch")
        return BatchPlan(1, None, "the inputs' batch dimensions differ")
    fixed = firsts.pop() if len(firsts) == 1 else 1
    if fixed > 1:
        return BatchPlan(fixed, fixed, f"fixed batch {fixed}: partial batches padded")
    return BatchPlan(1, None, "the model takes batch 1")


@dataclasses.dataclass
class _Request:
    feeds: Mapping[str, np.ndarray]
    key: tuple
    arrived: float = dataclasses.field(default_factory=time.monotonic)
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    outcome: dict[str, np.ndarray] | BaseException | None = None  # set before ``done``


class Batcher:
    """Runs ``run`` (a session's ``run``) on batches of the feeds that ``infer`` receives from any
    number of threads; ``sizes`` counts the batches run by their size. Close it when done."""

    def __init__(self, run: Run, plan: BatchPlan, *, wait_s: float | None = None,
                 streams: int | None = None) -> None:
        if wait_s is not None and wait_s < 0:
            raise InputError(f"batch_wait_ms must be >= 0, got {wait_s * 1e3:g}",
                             reference=Ref.BAD_CONFIG)
        self._run, self.plan, self.wait_s = run, plan, wait_s
        self.streams = streams  # live streams: a batch with this many requests runs at once
        self.sizes: collections.Counter[int] = collections.Counter()
        self._runs: collections.deque[tuple[int, float]] = collections.deque(
            maxlen=RECENT_RUNS)  # (rows, seconds) of the recent model runs
        self._free_at = 0.0  # time.monotonic() when the model's last run ended
        self._pending: collections.deque[_Request] = collections.deque()
        self._ready = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        if plan.batches:
            self._thread = threading.Thread(target=self._loop, name="edgefuse-batcher",
                                            daemon=True)
            self._thread.start()

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for ``feeds`` (a batch of one), run in a batch with other streams'."""
        if not self.plan.batches:
            with self._ready:
                self.sizes[1] += 1
            return self._run(feeds)
        request = _Request(feeds, _shape_key(feeds))
        with self._ready:
            if self._closed:
                raise EdgefuseError("the batcher is closed", reference=Ref.SESSION_CLOSED)
            self._pending.append(request)
            self._ready.notify_all()
        request.done.wait()
        if isinstance(request.outcome, BaseException):
            raise request.outcome
        return request.outcome

    def stream_ended(self) -> None:
        """One stream fewer to wait for."""
        with self._ready:
            if self.streams is not None:
                self.streams = max(self.streams - 1, 1)
            self._ready.notify_all()

    def rehearse(self, feeds: Mapping[str, np.ndarray]) -> None:
        """One full batch of ``feeds`` through the model before any stream starts: a model whose
        outputs do not split by frame fails here, and the largest gear is allocated."""
        if self.plan.batches:
            rows = [feeds] * self.plan.max_batch
            self._split(self._run_rows(rows), len(rows))

    def close(self) -> None:
        """Fails the requests still waiting and ends the thread."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # ---- the batcher thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            start = time.perf_counter()
            try:
                outputs = self._split(self._run_rows([r.feeds for r in batch]), len(batch))
            except BaseException as exc:  # noqa: BLE001 - every waiting stream gets the error
                for request in batch:
                    request.outcome = exc
                    request.done.set()
                continue
            with self._ready:
                self.sizes[len(batch)] += 1
                self._runs.append((len(batch), time.perf_counter() - start))
                self._free_at = time.monotonic()
            for request, rows in zip(batch, outputs, strict=True):
                request.outcome = rows
                request.done.set()

    def _next_batch(self) -> list[_Request] | None:
        """The requests of the next batch (same input shapes, oldest first), once it is due."""
        with self._ready:
            while not self._pending and not self._closed:
                self._ready.wait()
            if self._closed:
                for request in self._pending:
                    request.outcome = EdgefuseError("the batcher closed before this frame ran",
                                                  reference=Ref.SESSION_CLOSED)
                    request.done.set()
                self._pending.clear()
                return None
            since = max(self._pending[0].arrived, self._free_at)  # a frame in, the model free
            left_s = since + self._deadline_s() - time.monotonic()
            if left_s > 0:
                self._ready.wait_for(lambda: self._closed or self._full(), left_s)
            key = self._pending[0].key
            batch = [r for r in self._pending if r.key == key][: self.plan.max_batch]
            for request in batch:
                self._pending.remove(request)
            return batch

    def _deadline_s(self) -> float:
        """``wait_s``, or by default the model's fixed cost per run (``run_cost``), at most half
        the median run."""
        if self.wait_s is not None:
            return self.wait_s
        fixed, _ = run_cost(self._runs)
        median = statistics.median(seconds for _, seconds in self._runs) if self._runs else 0.0
        return min(fixed, median / 2)

    def _full(self) -> bool:
        wanted = self.plan.max_batch if self.streams is None else min(self.streams,
                                                                      self.plan.max_batch)
        return len(self._pending) >= wanted

    def _run_rows(self, rows: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        names = rows[0].keys()
        stacked = {name: np.concatenate([row[name] for row in rows], axis=0) for name in names}
        pad = (self.plan.pad_to or 0) - len(rows)
        if pad > 0:
            stacked = {name: np.concatenate([array, np.repeat(array[-1:], pad, axis=0)], axis=0)
                       for name, array in stacked.items()}
        return self._run(stacked)

    def _split(self, outputs: dict[str, np.ndarray], count: int) -> list[dict[str, np.ndarray]]:
        ran = max(count, self.plan.pad_to or 0)
        for name, array in outputs.items():
            if array.ndim == 0 or array.shape[0] != ran:
                raise InputError(
                    f"cannot batch this model: output '{name}' has shape {list(array.shape)} for "
                    f"a batch of {ran}, so its rows cannot be handed back to each stream",
                    hint="set batch: 1 in the config (each stream then runs the model alone)",
                    reference=Ref.BAD_CONFIG)
        return [{name: array[i:i + 1] for name, array in outputs.items()} for i in range(count)]


def run_cost(runs: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """The least-squares fit ``seconds = fixed + per_row * rows`` of ``runs`` (rows, seconds),
    both at least 0; (0, 0) until runs of two sizes were seen (nothing to fit)."""
    rows = np.array([r for r, _ in runs], float)
    seconds = np.array([t for _, t in runs], float)
    if len(set(rows.tolist())) < 2:
        return 0.0, 0.0
    per_row, fixed = np.polyfit(rows, seconds, 1)
    return max(float(fixed), 0.0), max(float(per_row), 0.0)


def describe_sizes(sizes: Mapping[int, int]) -> str:
    """``sizes`` (batch size -> batches run) as the apps and the demo print it."""
    return ", ".join(f"{count} of size {size}" for size, count in sorted(sizes.items())) or "none"


def _shape_key(feeds: Mapping[str, np.ndarray]) -> tuple:
    return tuple(sorted((name, array.shape[1:], array.dtype.str)
                        for name, array in feeds.items()))


class BatchedTask:
    """``task`` with its ``infer`` through ``batcher``; everything else is the task's own."""

    def __init__(self, task: Any, batcher: Batcher) -> None:
        self.task, self.batcher = task, batcher

    def __getattr__(self, name: str) -> Any:  # preprocess, postprocess, layout, describe, ...
        return getattr(self.task, name)

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.batcher.infer(feeds)
