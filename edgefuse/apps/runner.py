"""What the detection and segmentation apps share: flags, config, model, source, sinks, the run.

Why the apps live in the package and ``apps/`` at the repository root is a thin shell: ``edgefuse
detect`` must work from a wheel, which ships ``edgefuse*`` only, and ``python -m apps.detection``
from a checkout must run the same code. ``apps/detection/__main__.py`` calls ``edgefuse.cli``
with its ``config.yaml``; the logic is here and in ``edgefuse.apps.detection`` /
``segmentation``.

Order of a run: resolve the streams (``streams.py``: names, options, and that no output would
overwrite an input (the model, the config, a source) or another output), open the model (a
wrong kind of model fails here), warm it up and rehearse one grey frame through decode, record
and drawing (a layout the decoder refuses or a palette that cannot draw fails here), plan the
batches and rehearse a full batch (a model whose outputs do not split by frame fails here), open
every source (an unreadable source, or a folder where no image decodes, fails here), check each
stream's lines and zones against its frame size, create the sinks, run the streams, print the
summary. Everything that can be checked is checked before the first sink exists, so a run that
cannot succeed leaves no output file, not even an empty one.

One run path for one stream and many: a ``MultiPipeline`` (one ``Pipeline`` per stream, one
model session behind a ``Batcher``). Each stream has its own task wrapper (tracker, counts), its
own sinks and stats; its source's down/up/lost states become ``stream_*`` events. The run exits
0 while any stream ended normally; a lost stream is reported; every stream lost exits with the
loss. SIGTERM, SIGHUP and Ctrl-C stop it cleanly (``stopping.py``: exit 0, or 130 for Ctrl-C);
under systemd it reports ready, alive and stopping (``systemd.py``). Periodic stats lines go to
stderr (prefixed with the stream's name when there are several), the summary and the files
written to stdout (to stderr, before the error, when a stage failed).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse.apps import analytics
from edgefuse.apps import config as app_config
from edgefuse.apps.config import AppConfig
from edgefuse.apps.models import resolve_model
from edgefuse.apps.stopping import EXIT_CODES, stop_on_signals
from edgefuse.apps.streams import StreamPlan, plan_streams
from edgefuse.apps.systemd import Notifier, Watch, stall_s
from edgefuse.apps.tally import Tally
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import AppInfo
from edgefuse.runtime import BACKENDS, ModelSource, Session, open_session
from edgefuse.vision.model.adapter import VisionModel
from edgefuse.vision.serve.state import DEFAULT_STALL_S
from edgefuse.vision.streams.batching import Batcher, describe_sizes, plan_batches
from edgefuse.vision.streams.dvpp_source import decide, open_dvpp_source, open_units
from edgefuse.vision.streams.multi import MultiPipeline, MultiSummary, Stream
from edgefuse.vision.streams.recording import Recording, Recordings
from edgefuse.vision.streams.sinks import (
    ImageFolderSink,
    JsonlSink,
    Sink,
    VideoSink,
    WindowSink,
    display_available,
)
from edgefuse.vision.streams.sources import Source, open_source
from edgefuse.vision.streams.stats import LATENCY, PipelineStats

log = logging.getLogger(__name__)

MakeTask = Callable[[Session, "AppInfo | None", ModelSource, Any], VisionModel]


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags both apps take; each overrides the config key of the same name."""
    parser.add_argument("--config", metavar="CONFIG.yaml",
                        help="YAML config; flags override its values")
    parser.add_argument("--model", metavar="FILE|BUILD_DIR|NAME",
                        help="an .onnx file, a directory from `edgefuse compile`, or a catalogue "
                             "model (yolov8n, yolov8n:tiny, ...)")
    parser.add_argument("--source", metavar="SOURCE", action="append",
                        help="camera index, video file, rtsp/http URL, image folder, glob or "
                             "image; repeat for several streams (stream0, stream1, ...)")
    parser.add_argument("--save", metavar="OUT.mp4|DIR",
                        help="annotated video (.mp4, .avi, ...) or a folder for annotated images; "
                             "with several streams, {name} in it or a folder of NAME.mp4")
    parser.add_argument("--jsonl", metavar="OUT.jsonl",
                        help="one JSON record per frame; with several streams, {name} in it or "
                             "a folder of NAME.jsonl")
    parser.add_argument("--show", action="store_true", default=None,
                        help="show a window (only where a display exists; q or Esc stops)")
    parser.add_argument("--backend", action="append", metavar="NAME",
                        help="backend to try, in order; repeat or comma-separate "
                             f"({', '.join(BACKENDS)})")
    parser.add_argument("--batch", type=int, metavar="N",
                        help="frames of different streams per model run (default: one per "
                             "stream; 1: no batching)")
    parser.add_argument("--batch-wait-ms", type=float, metavar="MS",
                        help="how long a batch waits for the other streams' frames (default: "
                             "the model's fixed cost per run; 0: never)")
    parser.add_argument("--threads", type=int, metavar="N", help="ONNX Runtime intra-op threads")
    parser.add_argument("--device-id", type=int, metavar="N", help="NPU or GPU to use")
    parser.add_argument("--class-names", metavar="A,B,...",
                        help="class names by id, when the model carries none")
    parser.add_argument("--imgsz", metavar="H[,W]", help="model input size, for dynamic inputs")
    parser.add_argument("--stride", type=int, metavar="N", help="process every N-th frame")
    parser.add_argument("--decode", choices=("auto", "cpu", "dvpp"),
                        help="where frames are decoded and letterboxed: dvpp (the board's "
                             "media units, or their emulation on sim), cpu, or auto (dvpp where "
                             "the board's media API is present)")
    parser.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                        help="latest-frame reading (default: cameras and stream URLs)")
    parser.add_argument("--max-frames", type=int, metavar="N", help="stop after N frames")
    parser.add_argument("--queue-size", type=int, metavar="N", help="frames between stages")
    parser.add_argument("--stats-every", type=float, metavar="S",
                        help="seconds between stats lines on stderr (0: none)")
    parser.add_argument("--serial", action="store_true", default=None,
                        help="run every stage in one thread (for comparison)")


def config_from_args(kind: type[AppConfig], args: argparse.Namespace,
                     task_flags: tuple[str, ...]) -> Any:
    """The config file's values (or the defaults), with every flag given on top."""
    config = app_config.load(kind, args.config) if args.config else kind()
    flags = ("model", "save", "jsonl", "show", "batch", "batch_wait_ms", "threads", "device_id",
             "class_names", "stride", "decode", "live", "max_frames", "queue_size",
             "stats_every", "serial",
             *task_flags)
    given = {key: getattr(args, key) for key in flags if getattr(args, key) is not None}
    if args.source:  # replaces the config's source or sources
        several = len(args.source) > 1
        given["source"] = None if several else args.source[0]
        given["sources"] = args.source if several else None
    if args.backend:
        given["backend"] = ",".join(args.backend)
    if args.imgsz:
        sizes = args.imgsz.split(",")
        if not all(s.strip().isdigit() for s in sizes) or len(sizes) not in (1, 2):
            raise InputError(f"--imgsz takes H or H,W, got '{args.imgsz}'",
                             reference=Ref.BAD_CONFIG)
        given["preprocess"] = {**config.preprocess,
                               "size": [int(sizes[0]), int(sizes[-1])]}
    return app_config.from_mapping(kind, given, "command line", base=config)


def run_app(config: AppConfig, make_task: MakeTask, *, config_file: str | None = None) -> int:
    """Open everything the config names and run its streams; returns the exit code."""
    if not config.model:
        raise InputError("no model given", hint="pass --model, or set 'model:' in the config",
                         reference=Ref.BAD_CONFIG)
    plans = plan_streams(config, config_file=config_file)
    names = [plan.name for plan in plans]
    wanted = analytics.of(config)  # its cross-key checks fail before the model loads
    model_source, info = resolve_model(config.model)
    options: dict[str, Any] = {"device_id": config.device_id}
    if config.threads is not None:
        options["threads"] = config.threads
    with open_session(model_source, config.backend, **options) as session, \
            contextlib.ExitStack() as resources:
        task = make_task(session, info, model_source, config)
        task.warm_up()
        feeds = rehearse(task, draws=bool(config.save or config.show))
        batching = plan_batches(session, min(config.batch or len(plans), len(plans)))
        batcher = Batcher(task.infer, batching, streams=len(plans),
                          wait_s=None if config.batch_wait_ms is None
                          else config.batch_wait_ms / 1e3)
        resources.callback(batcher.close)
        batcher.rehearse(feeds)
        notifier = Notifier.from_environment()
        if notifier is not None:  # closed by the Watch too; here for a run that fails before
            resources.callback(notifier.close)
        extras = analytics.AnalyticsSetup(wanted, names,
                                          stall_s=stall_s(notifier, DEFAULT_STALL_S))
        resources.callback(extras.close)
        sources = open_sources(plans, resources, config.decode, task, model_source,
                               device_id=config.device_id or 0)
        tasks = {plan.name: extras.wrap(task, plan.name, lines=plan.lines, zones=plan.zones,
                                        frame_size=sources[plan.name].frame_size)
                 for plan in plans}
        with stop_on_signals() as stop_requests:
            running: list[MultiPipeline] = []  # the run, once it exists (the live view's stats)
            streams = open_streams(config, plans, sources, tasks, extras, running)
            note = "".join(f"; {n}" for n in (task.layout_note, task.preprocess_note) if n)
            batches = (f"; batch up to {batching.max_batch} ({batching.why})" if len(plans) > 1
                       else "")  # one stream: one frame per run, nothing to say
            print(f"{model_source.label}: {task.layout} on {session.backend}; "
                  f"{_describe_sources(sources)}{batches}{note}", file=sys.stderr)
            multi = MultiPipeline(
                streams, batcher=batcher, queue_size=config.queue_size,
                in_flight=config.in_flight, stop_timeout_s=config.stop_timeout_s,
                report_every=config.stats_every or None)
            for name, pipeline in multi.pipelines.items():
                prefix = f"{name}: " if len(plans) > 1 else ""
                pipeline.report = lambda snapshot, p=prefix: print(p + snapshot.line(),
                                                                   file=sys.stderr)
            running.append(multi)
            if extras.server is not None:
                print(f"live view: {extras.server.url}", file=sys.stderr)
            stop_requests.attach(multi)
            try:
                with (Watch(notifier, multi, extras.state) if notifier
                      else contextlib.nullcontext()):
                    summary = multi.run(concurrent=not config.serial)
            except BaseException:
                for name, pipeline in multi.pipelines.items():
                    print(_named(name, len(plans), pipeline.stats.snapshot().summary()),
                          file=sys.stderr)
                raise
    print_summary(summary, plans, streams, batcher, extras)
    return EXIT_CODES.get(summary.reason, 0)


DVPP_SOC = "Ascend310B4"  # a build without a recorded SoC: the Atlas 200I DK A2's


def open_sources(plans: list[StreamPlan], resources: contextlib.ExitStack, decode: str = "cpu",
                 task: Any = None, model_source: Any = None, *,
                 device_id: int = 0) -> dict[str, Source]:
    """Every stream's source, opened in order (an unreadable one fails here and the ones opened
    before it are closed); ``decode`` dvpp/auto: on DVPP where it can be (dvpp_source.decide):
    the board's media units on the acl backend, their emulation on sim."""
    sources: dict[str, Source] = {}
    for plan in plans:
        chosen = "cpu" if task is None else decide(decode, task.session.backend, task.plan,
                                                   plan.source)
        if chosen == "dvpp":
            soc = (model_source.manifest.soc if model_source.manifest else None) or DVPP_SOC
            pool = task.feed_pool
            units = open_units(task.session.backend, task.plan, soc, device_id,
                               session=task.session, shapes=pool.shapes if pool else None)
            source: Source = open_dvpp_source(plan.source, task.plan, units, soc,
                                              stride=plan.stride, live=plan.live,
                                              reconnect=plan.reconnect)
        else:
            source = open_source(plan.source, stride=plan.stride, live=plan.live,
                                 reconnect=plan.reconnect, camera=plan.camera)
        resources.callback(source.close)
        sources[plan.name] = source
    return sources


def open_streams(config: AppConfig, plans: list[StreamPlan], sources: dict[str, Source],
                 tasks: dict[str, Any], extras: analytics.AnalyticsSetup,
                 running: list[Any]) -> list[Stream]:
    """Every stream with its sinks; when one stream's sinks cannot be made, those made for the
    streams before it are discarded (no output is left by a run that never started)."""
    streams: list[Stream] = []
    try:
        for plan in plans:
            sinks = stream_sinks(config, plan, sources[plan.name], extras, running)
            sinks.append(Tally(tasks[plan.name].class_names))
            streams.append(Stream(plan.name, sources[plan.name], tasks[plan.name], sinks,
                                  plan.max_frames))
    except BaseException:
        for sink in (sink for stream in streams for sink in stream.sinks):
            sink.discard()
        raise
    return streams


def stream_sinks(config: AppConfig, plan: StreamPlan, source: Source,
                 extras: analytics.AnalyticsSetup, running: list[Any]) -> list[Sink]:
    """A stream's sinks; its source's down/up/lost states go to its JSON Lines and the events."""
    sinks = make_sinks(config, plan, live=source.live, recordings=extras.state.recordings)
    journal = next((sink for sink in sinks if isinstance(sink, JsonlSink)), None)
    if journal is not None:
        extras.journals[plan.name] = journal
    source.on_state(lambda state, detail: extras.stream_state(plan.name, state, detail,
                                                               journal))

    def stats() -> dict[str, Any]:
        return live_stats(running[0].pipelines[plan.name].stats) if running else {}

    # the analytics' sinks first: they close first, so a clip finished at the end is still
    # journalled (clip_ready) in the JSON Lines
    return extras.sinks(plan.name, stats=stats) + sinks


def print_summary(summary: MultiSummary, plans: list[StreamPlan], streams: list[Stream],
                  batcher: Batcher, extras: analytics.AnalyticsSetup) -> None:
    """Per stream: the stats summary, the files written and how it stopped; the lost streams;
    the batches run (with several streams); last, what each stream counted (``Tally``)."""
    several = len(streams) > 1
    for plan, stream in zip(plans, streams, strict=True):
        run = summary.streams.get(stream.name)
        if run is not None:
            print(_named(stream.name, len(streams), run.stats.summary()))
        for path in (plan.save, plan.jsonl):
            if path and Path(path).exists():
                print(f"wrote {path}")
        if run is None:
            continue
        for sink in stream.sinks:
            if isinstance(sink, VideoSink) and sink.segments:
                print(f"wrote {len(sink.segments)} video segment(s): {sink.segments[0]} .. "
                      f"{sink.segments[-1]}")
        if run.reason != "end":
            capture = run.stats.totals.get("capture")
            read = capture.count if capture is not None else 0
            ending = ("the frames in flight were dropped" if run.aborted
                      else "every one finished")
            print(_named(stream.name, len(streams), f"stopped: {run.reason.replace('_', ' ')} "
                                                    f"after {read} frames read, {ending}"))
    if summary.reason != "end" and all(run.reason == "end" for run in summary.streams.values()):
        print(f"stopped: {summary.reason.replace('_', ' ')} as the streams ended; every frame "
              "was read and finished")
    for name, why in summary.lost.items():
        print(f"lost {name}: {why.splitlines()[0]}")
    if several:
        print(f"batches run: {describe_sizes(batcher.sizes)}")
    if extras.media is not None:
        print(extras.media.summary())
    for state in extras.state.recordings.states():  # a live run's writes that failed
        if state.errors:
            print(state.summary())
    if extras.stream_events:
        print("stream events: " + ", ".join(f"{stream} {kind} {count}" for (stream, kind), count
                                            in sorted(extras.stream_events.items())))
    for line in extras.delivery_summary():  # every event delivered, queued or counted dropped
        print(line)
    for stream in streams:  # last: what each stream counted
        tally = next((sink for sink in stream.sinks if isinstance(sink, Tally)), None)
        if tally is not None and tally.line():
            print(f"counts: {_named(stream.name, len(streams), tally.line())}")


def _named(name: str, count: int, text: str) -> str:
    return f"{name}: {text}" if count > 1 else text


def _describe_sources(sources: dict[str, Source]) -> str:
    def one(source: Source) -> str:
        return f"{source.name} ({'live' if source.live else 'every frame'})"

    if len(sources) == 1:
        return f"source {one(next(iter(sources.values())))}"
    return f"{len(sources)} streams: " + ", ".join(f"{name} = {one(source)}"
                                                  for name, source in sources.items())


def live_stats(stats: PipelineStats) -> dict[str, Any]:
    """What the live view and /metrics show of a pipeline's stats."""
    snapshot = stats.snapshot()
    latency = snapshot.stages.get(LATENCY)
    shown: dict[str, Any] = {"fps": round(snapshot.fps, 2),
                             "dropped": snapshot.counters.get("dropped", 0),
                             "reconnects": snapshot.counters.get("reconnects", 0),
                             "drops": snapshot.counters.get("drops", 0),
                             "decode_errors": snapshot.counters.get("decode_errors", 0)}
    if latency is not None:
        shown.update(latency_p50_ms=round(latency.p50_ms, 2),
                     latency_p95_ms=round(latency.p95_ms, 2))
    return shown


def rehearse(task: VisionModel, *, draws: bool) -> dict[str, np.ndarray]:
    """One grey frame through every stage the run will use (decode, record, drawing), before any
    sink exists: an output layout the decoder cannot read or a palette that cannot draw fails
    here, so a failed run leaves no output file behind (not even an empty one). Returns the
    frame's feeds, for the batcher's own rehearsal."""
    height, width = task.plan.preprocess.size
    image = np.full((height, width, 3), 114, np.uint8)
    feeds, geometry = task.preprocess(image)
    result = task.postprocess(task.infer(feeds), geometry)
    task.describe(result)
    if draws:
        task.annotate(image, result)
    return feeds


def make_sinks(config: AppConfig, plan: StreamPlan, *, live: bool = False,
               recordings: Recordings | None = None) -> list[Sink]:
    """The stream's sinks (``plan``'s paths, checked by ``plan_streams``); a live source's JSONL
    is appended as it goes (rotated) and its video cut into finished segments, a file source's
    are renamed into place at the end. A live source's file sinks each get a ``Recording`` in
    ``recordings``: a write that fails (a full disk) suspends it, the stream goes on."""

    def recording(sink: str, folder: Path) -> Recording | None:
        if not live or recordings is None:
            return None
        return recordings.add(plan.name, sink, folder)

    sinks: list[Sink] = []
    try:
        if plan.jsonl:
            sinks.append(JsonlSink(plan.jsonl, append=live, stream=plan.name,
                                   rotate=config.jsonl_rotate if live else None,
                                   recording=recording("jsonl", Path(plan.jsonl).parent),
                                   retain=config.retain if live else None))
        if plan.save and Path(plan.save).suffix:
            sinks.append(VideoSink(plan.save, segment_s=config.segment_s if live else None,
                                   keep=config.segment_keep,
                                   recording=recording("video", Path(plan.save).parent),
                                   retain=config.retain if live else None))
        elif plan.save:
            sinks.append(ImageFolderSink(plan.save,
                                         recording=recording("images", Path(plan.save))))
    except BaseException:
        for sink in sinks:
            sink.discard()
        raise
    if config.show:
        if display_available():
            sinks.append(WindowSink())
        else:
            log.warning("no display here: --show ignored")
    return sinks


def class_ids(wanted: tuple[int | str, ...], names: tuple[str, ...]) -> tuple[int, ...]:
    """Class filter entries (ids or names) as ids; an unknown name is the user's error."""
    ids = []
    for item in wanted:
        if isinstance(item, int):
            ids.append(item)
        elif item in names:
            ids.append(names.index(item))
        else:
            raise InputError(f"unknown class '{item}' in classes",
                             hint=f"the model's classes: {', '.join(names) or 'unnamed'}",
                             reference=Ref.BAD_CONFIG)
    return tuple(ids)

