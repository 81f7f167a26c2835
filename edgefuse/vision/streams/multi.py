"""Many streams at once: one ``Pipeline`` per stream, one shared model, one run to stop.

Why a pipeline per stream rather than one pipeline over a merged source (nvstreammux merges
sources into one batch stream): everything that belongs to a camera stays that camera's own —
its reading policy and reconnects, its frame order, its tracker and counts (a ``Tracked`` task
per stream), its sinks, its stats and its ``max_frames`` — and only the model is shared, through
a ``Batcher`` that runs frames of different streams as one batch and hands each its own rows.

How streams end: a file stream that reaches its end is done and the others go on; a live stream
that stays down after its reconnect attempts (``error[source-lost]``) is reported as lost and the
others go on, unless every stream is lost (then ``run`` raises the loss). Any other error (the
model, a sink) stops every stream and ``run`` raises it. ``stop`` and ``interrupt`` reach every
stream; the thread calling ``run`` waits on one completion event per stream inside the
KeyboardInterrupt handling, as ``Pipeline.run`` does, so a Ctrl-C is an interrupt of all. One
stream runs in the calling thread itself (an app with one camera behaves as a ``Pipeline``
alone), and an interrupt that came after every stream ended still reads as one in the summary.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from edgefuse.errors import InputError, Ref
from edgefuse.vision.streams.batching import BatchedTask, Batcher
from edgefuse.vision.streams.pipeline import Pipeline, RunSummary
from edgefuse.vision.streams.sinks import Sink
from edgefuse.vision.streams.sources import Source

log = logging.getLogger(__name__)

_POLL_S = 0.05


@dataclasses.dataclass
class Stream:
    """One camera of a multi-stream run: its name, source, task (its own tracker), sinks."""

    name: str
    source: Source
    task: Any
    sinks: Sequence[Sink] = ()
    max_frames: int | None = None


@dataclasses.dataclass(frozen=True)
class MultiSummary:
    """Each stream's summary (a lost stream has none), the streams lost, with why, and the first
    interrupt asked for (``interrupt``, a Ctrl-C), even one that came after every stream ended."""

    streams: dict[str, RunSummary]
    lost: dict[str, str]
    interrupted: str | None = None

    @property
    def reason(self) -> str:
        """The first stream's reason that is not a natural end, else the interrupt asked for
        (so a Ctrl-C always reads as one), else ``end``."""
        reasons = [s.reason for s in self.streams.values() if s.reason != "end"]
        return reasons[0] if reasons else self.interrupted or "end"


def check_stream_names(names: Sequence[str]) -> None:
    """Stream names must be unique and usable in file names, topics and URLs."""
    seen: set[str] = set()
    for name in names:
        if not name or any(c in name for c in "/\\#+ {}") or name in (".", ".."):
            raise InputError(f"stream name '{name}' cannot be used",
                             hint="use letters, digits, '-', '_' or '.' (it names files, MQTT "
                                  "topics and URLs)", reference=Ref.BAD_CONFIG)
        if name in seen:
            raise InputError(f"two streams are named '{name}'",
                             hint="give each source its own name", reference=Ref.BAD_CONFIG)
        seen.add(name)


class MultiPipeline:
    """Runs every ``Stream`` in its own ``Pipeline``; ``batcher`` (when given) serves all their
    inferences. ``options`` go to each ``Pipeline`` (``queue_size``, ``in_flight``, ...)."""

    def __init__(self, streams: Sequence[Stream], *, batcher: Batcher | None = None,
                 on_lost: Callable[[str, BaseException], None] | None = None,
                 **options: Any) -> None:
        if not streams:
            raise InputError("no streams to run", reference=Ref.BAD_CONFIG)
        check_stream_names([s.name for s in streams])
        self.batcher = batcher
        self.on_lost = on_lost
        self.pipelines: dict[str, Pipeline] = {
            stream.name: Pipeline(
                stream.source, BatchedTask(stream.task, batcher) if batcher else stream.task,
                stream.sinks, max_frames=stream.max_frames, **options)
            for stream in streams}
        self.first_frame = AnyOf([p.first_frame for p in self.pipelines.values()])
        self._interrupts: list[str] = []  # appended from signal handlers, as Pipeline's

    @property
    def stopping(self) -> bool:
        return all(p.stopping for p in self.pipelines.values())

    @property
    def frames_done(self) -> int:
        return sum(p.frames_done for p in self.pipelines.values())

    def stop(self, reason: str = "stopped") -> None:
        for pipeline in self.pipelines.values():
            pipeline.stop(reason)

    def interrupt(self, reason: str = "interrupted") -> None:
        """As ``Pipeline.interrupt``, for every stream (safe from a signal handler)."""
        self._interrupts.append(reason)
        for pipeline in self.pipelines.values():
            pipeline.interrupt(reason)

    def run(self, *, concurrent: bool = True) -> MultiSummary:
        """Runs every stream to its end; raises a stream's error (or the loss of every stream)."""
        summaries: dict[str, RunSummary] = {}
        errors: dict[str, BaseException] = {}
        done = {name: threading.Event() for name in self.pipelines}
        bodies = [self._body(name, pipeline, concurrent, summaries, errors, done[name])
                  for name, pipeline in self.pipelines.items()]
        if len(bodies) == 1:  # in this thread, as a Pipeline alone: a Ctrl-C lands in its wait
            bodies[0]()
        else:
            workers = [threading.Thread(target=body, name=f"edgefuse-stream-{name}",
                                        daemon=True)
                       for name, body in zip(self.pipelines, bodies, strict=True)]
            for worker in workers:
                worker.start()
            self._wait(done)
            for worker in workers:
                worker.join()
        lost = {name: error for name, error in errors.items() if _is_loss(error)}
        failures = [error for error in errors.values() if not _is_loss(error)]
        if failures:
            raise failures[0]
        if lost and len(lost) == len(self.pipelines):
            raise next(iter(lost.values()))
        return MultiSummary(summaries, {name: str(error) for name, error in lost.items()},
                            self._interrupts[0] if self._interrupts else None)

    def _body(self, name: str, pipeline: Pipeline, concurrent: bool,
              summaries: dict[str, RunSummary], errors: dict[str, BaseException],
              done: threading.Event) -> Callable[[], None]:
        def body() -> None:
            try:
                summaries[name] = pipeline.run(concurrent=concurrent)
            except BaseException as exc:  # noqa: BLE001 - run() sorts losses from failures
                errors[name] = exc
                if _is_loss(exc):
                    log.warning("%s: %s; the other streams go on", name, exc)
                    if self.on_lost is not None:
                        self.on_lost(name, exc)
                else:
                    self.interrupt("error")
                    self.interrupt("error")  # the second aborts: the model or a sink failed
            finally:
                if self.batcher is not None:
                    self.batcher.stream_ended()
                done.set()
        return body

    def _wait(self, done: dict[str, threading.Event]) -> None:
        """Until every stream has ended; a Ctrl-C anywhere in the wait interrupts every stream."""
        while True:
            try:
                for event in done.values():
                    while not event.wait(_POLL_S):
                        pass
                return
            except KeyboardInterrupt:
                self.interrupt("interrupted")


class AnyOf:
    """Set when any of ``events`` is (the first frame of any stream)."""

    def __init__(self, events: Sequence[threading.Event]) -> None:
        self.events = list(events)

    def is_set(self) -> bool:
        return any(event.is_set() for event in self.events)


def _is_loss(error: BaseException) -> bool:
    return isinstance(error, InputError) and error.reference == Ref.SOURCE_LOST
