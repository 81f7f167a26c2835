"""The pipeline: capture -> preprocess -> infer -> postprocess -> sink, one thread per stage.

Why threads and bounded queues (the Ascend C++ multi-input sample, DeepStream's queues, OpenVINO's
async demos): the model stage spends its time in ONNX Runtime or pyACL with the GIL released,
OpenCV decodes, resizes, draws and encodes with the GIL released too, so decoding, drawing and
pre/post-processing overlap inference and the frame rate approaches the model's own throughput
(the serial loop most reference apps use pays for every stage on every frame). Each stage has
one thread, so frames leave in the order they came. Queues hold ``queue_size`` frames: a file
source is pushed back on, never dropped. A live source is read ahead by at most ``in_flight``
frames; the rest wait in its one-frame slot, where newer frames replace them, so latency stays
bounded by a few frame times instead of growing.

Shutdown, every way out ends with every thread joined, every sink closed and a summary:
- end of stream or ``max_frames``: capture sends an end marker that drains the stages, so every
  frame read from a file is processed and written;
- ``stop()`` or a first Ctrl-C: capture stops reading and the frames in flight are finished; a
  second Ctrl-C aborts;
- a stage raises: every stage stops at its next queue operation and ``run`` raises that error;
- a sink raises ``SinkClosed``: reading stops, the frames in flight are discarded.
Every queue operation waits with a timeout and checks the abort flag, so no thread can hang on a
queue; a live reader stuck in a network read is left as a daemon thread after a timeout.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from edgefuse.vision.streams.frames import FrameResult
from edgefuse.vision.streams.sinks import Sink, SinkClosed
from edgefuse.vision.streams.sources import Source
from edgefuse.vision.streams.stats import PipelineStats, StatsSnapshot

log = logging.getLogger(__name__)

STAGES = ("capture", "preprocess", "infer", "postprocess", "sink")
_END = object()
_POLL_S = 0.05
_JOIN_S = 10.0


class Task(Protocol):
    """What a pipeline runs per frame (``Detector`` and ``Segmenter`` are tasks)."""

    def preprocess(self, image: np.ndarray) -> tuple[dict[str, np.ndarray], Any]: ...

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Any) -> Any: ...

    def annotate(self, image: np.ndarray, result: Any) -> np.ndarray: ...

    def describe(self, result: Any) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """How a run ended (``end``, ``max_frames``, ``stopped``, ``interrupted``, ``sink_closed``)
    and its statistics."""

    reason: str
    stats: StatsSnapshot


class Pipeline:
    """Runs ``task`` over ``source`` into ``sinks``; ``stats`` is live while it runs."""

    def __init__(
        self,
        source: Source,
        task: Task,
        sinks: Sequence[Sink] = (),
        *,
        queue_size: int = 2,
        in_flight: int = 3,
        max_frames: int | None = None,
        report_every: float | None = 5.0,
        report: Callable[[StatsSnapshot], None] | None = None,
    ) -> None:
        self.source = source
        self.task = task
        self.sinks = list(sinks)
        self.queue_size = max(int(queue_size), 1)
        self.in_flight = max(int(in_flight), 1)
        self.max_frames = max_frames
        self.report_every = report_every
        self.report = report or (lambda snapshot: log.info("%s", snapshot.line()))
        self.stats = PipelineStats(STAGES)
        self._stop = threading.Event()  # finish the frames in flight, read no more
        self._abort = threading.Event()  # drop everything now
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._reason = "end"
        self._tokens = threading.Semaphore(self.in_flight) if source.live else None
        self._needs_image = any(sink.needs_image for sink in self.sinks)
        self._sink_closed = False
        self._read = 0
        self._last_report = 0.0

    # ---- public -------------------------------------------------------------------------------

    def run(self, *, concurrent: bool = True) -> RunSummary:
        """Process the source to its end; ``concurrent=False`` runs every stage in this thread
        (the serial loop, for comparison). Raises the first error a stage raised."""
        self.source.attach(self.stats)
        try:
            for sink in self.sinks:
                sink.start(fps=self.source.fps, describe=self.task.describe)
            self.stats.restart()
            if concurrent:
                self._run_threads()
            else:
                self._run_serial()
        finally:
            self._shutdown()
        if self._error is not None:
            raise self._error
        snapshot = self.stats.snapshot()
        return RunSummary(self._reason, snapshot)

    def stop(self, reason: str = "stopped") -> None:
        """Stop reading; the frames already read are finished. Safe from any thread."""
        if not self._stop.is_set():
            self._reason = reason
            self._stop.set()

    # ---- stages -------------------------------------------------------------------------------

    def _capture_one(self) -> FrameResult | None | object:
        """The next frame as a FrameResult, None when none came yet, _END at the end."""
        if self._stop.is_set() or self._abort.is_set():
            return _END
        if self.max_frames is not None and self._read >= self.max_frames:
            self._reason = "max_frames"
            return _END
        if self._tokens is not None and not self._tokens.acquire(timeout=_POLL_S):
            return None
        frame = self.source.read(timeout=_POLL_S)
        if frame is None:
            if self._tokens is not None:
                self._tokens.release()
            return _END if self.source.finished else None
        self._read += 1
        self.stats.record("capture", frame.decode_s)
        result = FrameResult(frame)
        result.timings_ms["capture"] = frame.decode_s * 1e3
        return result

    def _preprocess(self, item: FrameResult) -> None:
        item.feeds, item.geometry = self.task.preprocess(item.frame.image)

    def _infer(self, item: FrameResult) -> None:
        item.outputs = self.task.infer(item.feeds)
        item.feeds = None

    def _postprocess(self, item: FrameResult) -> None:
        item.result = self.task.postprocess(item.outputs, item.geometry)
        item.outputs = None

    def _sink(self, item: FrameResult) -> None:
        try:
            if not self._sink_closed:
                start = time.perf_counter()
                image = (self.task.annotate(item.frame.image, item.result)
                         if self._needs_image else None)
                for sink in self.sinks:
                    sink.write(item, image)
                self.stats.record("sink", time.perf_counter() - start)
                self.stats.frame_done(time.perf_counter() - item.frame.clock)
                self._maybe_report()
        except SinkClosed as closed:
            log.info("%s; stopping", closed)
            self._sink_closed = True
            self.stats.count("sink_closed")
            self.stop("sink_closed")
        finally:
            if self._tokens is not None:
                self._tokens.release()

    def _timed(self, name: str, step: Callable[[FrameResult], None], item: FrameResult) -> None:
        start = time.perf_counter()
        step(item)
        elapsed = time.perf_counter() - start
        self.stats.record(name, elapsed)
        item.timings_ms[name] = elapsed * 1e3

    def _maybe_report(self) -> None:
        now = time.perf_counter()
        if self.report_every is not None and now - self._last_report >= self.report_every:
            self._last_report = now
            self.report(self.stats.snapshot())

    # ---- running ------------------------------------------------------------------------------

    def _run_serial(self) -> None:
        self._read = 0
        self._last_report = time.perf_counter()
        steps = (("preprocess", self._preprocess), ("infer", self._infer),
                 ("postprocess", self._postprocess))
        try:
            while True:
                item = self._capture_one()
                if item is _END:
                    return
                if item is None:
                    continue
                for name, step in steps:
                    self._timed(name, step, item)
                self._sink(item)
        except KeyboardInterrupt:
            self._reason = "interrupted"
        except BaseException as exc:  # noqa: BLE001 - run() raises it after shutting down
            self._fail(exc)

    def _run_threads(self) -> None:
        self._read = 0
        self._last_report = time.perf_counter()
        queues = [queue.Queue(maxsize=self.queue_size) for _ in range(4)]
        workers = [
            threading.Thread(target=self._guard(self._capture_loop, queues[0]),
                             name="edgefuse-capture"),
            *[threading.Thread(target=self._guard(self._stage_loop, name, step, q_in, q_out),
                               name=f"edgefuse-{name}")
              for name, step, q_in, q_out in (
                  ("preprocess", self._preprocess, queues[0], queues[1]),
                  ("infer", self._infer, queues[1], queues[2]),
                  ("postprocess", self._postprocess, queues[2], queues[3]))],
            threading.Thread(target=self._guard(self._sink_loop, queues[3]), name="edgefuse-sink"),
        ]
        for worker in workers:
            worker.daemon = True
            worker.start()
        interrupts = 0
        while any(worker.is_alive() for worker in workers):
            try:
                for worker in workers:
                    worker.join(timeout=_POLL_S)
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts == 1:
                    log.warning("stopping: finishing the frames in flight (Ctrl-C again to abort)")
                    self.stop("interrupted")
                else:
                    self._reason = "interrupted"
                    self._abort.set()
        for worker in workers:
            worker.join(timeout=_JOIN_S)

    def _guard(self, loop: Callable[..., None], *args: Any) -> Callable[[], None]:
        def body() -> None:
            try:
                loop(*args)
            except BaseException as exc:  # noqa: BLE001 - run() raises it after shutting down
                self._fail(exc)
        return body

    def _fail(self, exc: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = exc
                self._reason = "error"
        self._abort.set()

    def _capture_loop(self, out: queue.Queue) -> None:
        while True:
            item = self._capture_one()
            if item is None:
                continue
            if not self._put(out, item) or item is _END:
                return

    def _stage_loop(self, name: str, step: Callable[[FrameResult], None], inbox: queue.Queue,
                    out: queue.Queue) -> None:
        while True:
            item = self._get(inbox)
            if item is None:
                return
            if item is not _END:
                self._timed(name, step, item)
            if not self._put(out, item) or item is _END:
                return

    def _sink_loop(self, inbox: queue.Queue) -> None:
        while True:
            item = self._get(inbox)
            if item is None or item is _END:
                return
            self._sink(item)

    def _put(self, target: queue.Queue, item: Any) -> bool:
        while not self._abort.is_set():
            try:
                target.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, source: queue.Queue) -> Any:
        while not self._abort.is_set():
            try:
                return source.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        return None

    def _shutdown(self) -> None:
        self.stats.finish()
        errors = []
        try:
            self.source.close()
        except Exception as exc:  # noqa: BLE001 - reported below, after the sinks are closed
            errors.append(exc)
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - every sink gets its close
                errors.append(exc)
        if errors and self._error is None:
            self._error = errors[0]
