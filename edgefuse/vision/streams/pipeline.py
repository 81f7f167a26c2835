"""The pipeline: capture -> preprocess -> infer -> postprocess -> sink, one thread per stage.

Why threads and bounded queues (the Ascend C++ multi-input sample, DeepStream's queues, OpenVINO's
async demos): the model stage spends its time in ONNX Runtime or pyACL with the GIL released,
OpenCV decodes, resizes, draws and encodes with the GIL released too, so decoding, drawing and
pre/post-processing overlap inference and the frame rate approaches the model's own throughput
(the serial loop most reference apps use pays for every stage on every frame). Each stage has
one thread, so frames leave in the order they came. Queues hold ``queue_size`` frames: a file
source is pushed back on, never dropped. A live source is read ahead by at most ``in_flight``
frames (default: derived from the measured stage times, see ``in_flight.py``); the rest wait in
its one-frame slot, where newer frames replace them, so latency stays bounded.

Shutdown, every way out ends with every thread joined, every sink closed and a summary:
- end of stream or ``max_frames``: capture sends an end marker that drains the stages, so every
  frame read from a file is processed and written;
- ``stop()``, a first ``interrupt()`` or a first Ctrl-C: capture stops reading and the frames in
  flight are finished; a second one aborts (the frames in flight are dropped, the sinks are
  still closed, so what is complete is committed); frames in flight that are not finished
  within ``stop_timeout_s`` are aborted the same way, so a stop takes a bounded time;
- a stage raises: every stage stops at its next queue operation and ``run`` raises that error;
  the sinks discard what they staged, so a failed run leaves no output that looks finished (a
  live source's finished segments and appended lines stay: they are whole);
- otherwise every sink first ``finish``-es (flushes and checks its temporary file), and only
  when all succeeded are they closed (renamed into place): a full disk at the very end fails the
  run and discards every output, rather than leaving the JSON Lines without their video;
- a sink raises ``SinkClosed``: reading stops, the frames in flight are discarded.
Every queue operation waits with a timeout and checks the abort flag, so no thread can hang on a
queue. The thread calling ``run`` waits on one completion event per stage thread, set in the
thread's ``finally``, and the whole wait sits inside the KeyboardInterrupt handling: a Ctrl-C
landing anywhere in it is counted as an interrupt and the wait goes on, so ``run`` never returns
(nor closes a sink) while a stage thread still works. A stage stuck in a call that never returns
(a hung device) is left behind as a daemon thread ``ABORT_WAIT_S`` after an abort; the sinks are
then closed only if the sink thread itself has ended (no write can follow a close).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from edgefuse.vision.streams.frames import FrameResult
from edgefuse.vision.streams.in_flight import InFlight
from edgefuse.vision.streams.sinks import Sink, SinkClosed
from edgefuse.vision.streams.sources import Source
from edgefuse.vision.streams.stats import PipelineStats, StatsSnapshot

log = logging.getLogger(__name__)

STAGES = ("capture", "preprocess", "infer", "postprocess", "sink")
_END = object()
_POLL_S = 0.05
STOP_TIMEOUT_S = 10.0  # default: a stop finishes the frames in flight within this, or aborts
ABORT_WAIT_S = 5.0  # after an abort, how long the stage threads get to notice it


class Task(Protocol):
    """What a pipeline runs per frame (``Detector`` and ``Segmenter`` are tasks)."""

    def preprocess(self, image: np.ndarray) -> tuple[dict[str, np.ndarray], Any]: ...

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Any) -> Any: ...

    def annotate(self, image: np.ndarray, result: Any) -> np.ndarray: ...

    def describe(self, result: Any) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """How a run ended (``end``, ``max_frames``, ``stopped``, ``interrupted``, ``sink_closed``,
    or the reason given to ``interrupt``), whether the frames in flight were dropped by an
    abort, and the statistics."""

    reason: str
    stats: StatsSnapshot
    aborted: bool = False


class Pipeline:
    """Runs ``task`` over ``source`` into ``sinks``; ``stats`` is live while it runs."""

    def __init__(
        self,
        source: Source,
        task: Task,
        sinks: Sequence[Sink] = (),
        *,
        queue_size: int = 2,
        in_flight: int | None = None,
        max_frames: int | None = None,
        stop_timeout_s: float | None = STOP_TIMEOUT_S,
        report_every: float | None = 5.0,
        report: Callable[[StatsSnapshot], None] | None = None,
    ) -> None:
        self.source = source
        self.task = task
        self.sinks = list(sinks)
        self.queue_size = max(int(queue_size), 1)
        self.max_frames = max_frames
        self.stop_timeout_s = stop_timeout_s
        self.report_every = report_every
        self.report = report or (lambda snapshot: log.info("%s", snapshot.line()))
        self.stats = PipelineStats(STAGES)
        self._stop = threading.Event()  # finish the frames in flight, read no more
        self._abort = threading.Event()  # drop everything now
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._reason = "end"
        self._aborted = False
        self._interrupts: list[str] = []  # appended from signal handlers: handled by run's wait
        self.first_frame = threading.Event()  # set when the first frame was read
        self._tokens = InFlight(in_flight, self.stats) if source.live else None
        self._needs_image = any(sink.needs_image for sink in self.sinks)
        self._sink_closed = False
        self._read = 0
        self._last_report = 0.0

    # ---- public -------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int | None:
        """The live source's current frames-in-flight limit (None for a file source)."""
        return None if self._tokens is None else self._tokens.limit

    @property
    def frames_done(self) -> int:
        """Frames through every stage so far (what a watchdog watches)."""
        return self.stats.frames_done

    @property
    def stopping(self) -> bool:
        """Whether reading has stopped (a stop, an interrupt, the end of the source)."""
        return self._stop.is_set() or self._abort.is_set()

    def run(self, *, concurrent: bool = True) -> RunSummary:
        """Process the source to its end; ``concurrent=False`` runs every stage in this thread
        (the serial loop, for comparison). Raises the first error a stage raised."""
        self.source.attach(self.stats)
        sinks_idle = True
        try:
            for sink in self.sinks:
                sink.start(fps=self.source.fps, describe=self.task.describe)
            self.stats.restart()
            if concurrent:
                sinks_idle = self._run_threads()
            else:
                self._run_serial()
        finally:
            self._shutdown(close_sinks=sinks_idle)
        if self._error is not None:
            raise self._error
        snapshot = self.stats.snapshot()
        return RunSummary(self._reason, snapshot, self._aborted)

    def stop(self, reason: str = "stopped") -> None:
        """Stop reading; the frames already read are finished. Safe from any thread."""
        if not self._stop.is_set():
            self._reason = reason
            self._stop.set()

    def interrupt(self, reason: str = "interrupted") -> None:
        """The first call stops like ``stop(reason)``, the second aborts. Safe from a signal
        handler: it only records the request (a list append), which the thread in ``run`` acts
        on within ``_POLL_S``; a handler that took a lock here could deadlock on the very thread
        it interrupted."""
        self._interrupts.append(reason)

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
        self.first_frame.set()
        self.stats.record("capture", frame.decode_s)
        result = FrameResult(frame)
        result.timings_ms["capture"] = frame.decode_s * 1e3
        return result

    def _preprocess(self, item: FrameResult) -> None:
        if item.frame.device_input is not None:  # decode: dvpp made the model's input
            item.feeds, item.geometry = self.task.preprocess_device(*item.frame.device_input)
        else:
            item.feeds, item.geometry = self.task.preprocess(item.frame.image)

    def _infer(self, item: FrameResult) -> None:
        item.outputs = self.task.infer(item.feeds)
        item.feeds = None

    def _postprocess(self, item: FrameResult) -> None:
        if getattr(self.task, "takes_frame", False):  # trackers: the capture time, in order
            item.result = self.task.postprocess(item.outputs, item.geometry, item.frame)
        else:
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
        handled = 0
        try:
            while True:
                handled = self._take_interrupts(handled)
                if self._abort.is_set():
                    return
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

    def _run_threads(self) -> bool:
        """Runs the stage threads and waits for them; returns whether the sink thread ended."""
        self._read = 0
        self._last_report = time.perf_counter()
        queues = [queue.Queue(maxsize=self.queue_size) for _ in range(4)]
        loops = [
            ("capture", self._capture_loop, (queues[0],)),
            *[(name, self._stage_loop, (name, step, q_in, q_out))
              for name, step, q_in, q_out in (
                  ("preprocess", self._preprocess, queues[0], queues[1]),
                  ("infer", self._infer, queues[1], queues[2]),
                  ("postprocess", self._postprocess, queues[2], queues[3]))],
            ("sink", self._sink_loop, (queues[3],)),
        ]
        done = [threading.Event() for _ in loops]
        workers = [threading.Thread(target=self._guard(loop, event, *args),
                                    name=f"edgefuse-{name}", daemon=True)
                   for (name, loop, args), event in zip(loops, done, strict=True)]
        self._start(workers)
        self._wait(workers, done)
        return done[-1].is_set()

    def _start(self, workers: list[threading.Thread]) -> None:
        """Starts the stage threads with Ctrl-C recorded instead of raised: a KeyboardInterrupt
        inside ``Thread.start`` cannot tell whether the thread started. Only where Python's own
        SIGINT handler is installed (the main thread; a program with its own handler keeps it),
        and only for these few microseconds."""
        defer = (threading.current_thread() is threading.main_thread()
                 and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        previous = (signal.signal(signal.SIGINT, lambda *_: self.interrupt("interrupted"))
                    if defer else None)
        try:
            for worker in workers:
                worker.start()
        finally:
            if defer:
                signal.signal(signal.SIGINT, previous)

    def _wait(self, workers: list[threading.Thread], done: list[threading.Event]) -> None:
        """Until every stage thread has ended (each sets its event in its ``finally``), acting
        on interrupts and the stop timeout. Every statement of the wait is inside the
        KeyboardInterrupt handling: a Ctrl-C anywhere in it is one more interrupt."""
        handled = 0
        stop_deadline: float | None = None
        abort_deadline: float | None = None
        while True:
            try:
                while not all(event.is_set() for event in done):
                    handled = self._take_interrupts(handled)
                    now = time.monotonic()
                    if (stop_deadline is None and self.stop_timeout_s is not None
                            and self._stop.is_set()):
                        stop_deadline = now + self.stop_timeout_s
                    if (stop_deadline is not None and now >= stop_deadline
                            and not self._abort.is_set()):
                        log.warning("the frames in flight did not finish within %g s "
                                    "(stop_timeout_s); dropping them", self.stop_timeout_s)
                        self._abort_now()
                    if self._abort.is_set():
                        abort_deadline = abort_deadline or now + ABORT_WAIT_S
                        if now >= abort_deadline:
                            stuck = [worker.name for worker, event
                                     in zip(workers, done, strict=True) if not event.is_set()]
                            log.error("%s still busy %g s after the abort (a call that never "
                                      "returns?); left behind", ", ".join(stuck), ABORT_WAIT_S)
                            return
                    next(event for event in done if not event.is_set()).wait(_POLL_S)
                for worker in workers:  # each has set its event: only its exit is left
                    worker.join()
                return
            except KeyboardInterrupt:
                self._interrupts.append("interrupted")

    def _take_interrupts(self, handled: int) -> int:
        """Acts on the interrupts recorded since the ``handled`` first: stop, then abort."""
        while handled < len(self._interrupts):
            reason = self._interrupts[handled]
            handled += 1
            if handled == 1:
                log.warning("stopping (%s): finishing the frames in flight (again to abort)",
                            reason)
                self.stop(reason)
            elif not self._abort.is_set():
                log.warning("aborting (%s): dropping the frames in flight", reason)
                self._abort_now()
        return handled

    def _abort_now(self) -> None:
        self._aborted = True
        self._abort.set()

    def _guard(self, loop: Callable[..., None], done: threading.Event,
               *args: Any) -> Callable[[], None]:
        def body() -> None:
            try:
                loop(*args)
            except BaseException as exc:  # noqa: BLE001 - run() raises it after shutting down
                self._fail(exc)
            finally:
                done.set()
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

    def _shutdown(self, *, close_sinks: bool) -> None:
        """Close the source and every sink once: ``finish`` all, then ``close`` all, or
        ``discard`` all when the run or a ``finish`` failed (the module docstring); a Ctrl-C
        here is one more interrupt, never a reason to leave a sink unclosed."""
        self.stats.finish()
        errors: list[BaseException] = []
        self._call(self.source.close, errors)
        if close_sinks:
            unfinished: list[BaseException] = []
            if self._error is None:
                for sink in self.sinks:
                    self._call(sink.finish, unfinished)
            errors += unfinished
            failed = self._error is not None or bool(unfinished)
            for sink in self.sinks:
                self._call(sink.discard if failed else sink.close, errors)
        elif self.sinks:
            log.error("the sink thread is still busy: the outputs were left unfinished")
        if errors and self._error is None:
            self._error = errors[0]

    def _call(self, end: Callable[[], None], errors: list[BaseException]) -> None:
        try:
            end()
        except KeyboardInterrupt:
            self._interrupts.append("interrupted")
        except Exception as exc:  # noqa: BLE001 - every sink gets its end; reported by run
            errors.append(exc)
