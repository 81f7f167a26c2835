"""Benchmark many live streams on one model: aggregate fps against the batched model-only ceiling,
per-stream latency against one batch's inference, memory over a long run (issue 17 §1).

Setting: N = 1, 2, 4, 8 MJPEG cameras (edgefuse.testing.mjpeg) serve the package's sample clip on
127.0.0.1 at ``--fps`` (25), each frame numbered, from a child process (their JPEG encoding then
neither holds the measured process's GIL nor counts in its memory; each frame's send time goes to
shared memory, on ``time.perf_counter``, the system-wide monotonic clock). The measured process
runs the library directly: one ``Stream`` per camera (its own detector task over the one session,
a sink that reads each result's frame number back), a ``MultiPipeline`` and one ``Batcher``
(``plan_batches`` for N; its default deadline, or greedy, ``--wait-ms``). The model is the apps'
trained shapes YOLOv8 at 256, exported once with a dynamic batch dimension (torch in a child
process, cached under bench/results/models), so frames of different cameras run as one batch.

Cases: ``stand-in`` (first: the figure that speaks for the board) replaces the session by
``BatchStandIn``, which sleeps ``a + b * rows`` (fitted to the real model's latency at batch 1,
2, 4 and 8 on this host, measured once per invocation in its own process; ``a`` at least 0) and
replays the real model's output row for the clip's first frame per row: inference off the host
CPU, as on the board's NPU. ``cpu`` runs the ONNX Runtime CPU session (``--threads``); on a
2-core host it competes with decoding and the other stages for the cores: CPU-bound and noisy.

Per N and case, in a fresh process per run, N in alternating order for ``--reps`` repetitions,
each figure the median over repetitions:
- aggregate fps: frames out of all streams over ``--seconds`` (after ``--warmup``);
- ceiling: the model alone (session or stand-in) in a loop at batch min(N, the plan's max), in
  frames per second; the bound a run can reach is min(ceiling, offered), offered being the frames
  the cameras actually sent in the window, and the fps ratio is aggregate fps over that bound;
- latency p50/p95 per stream, end to end (from the camera sending the frame to its result leaving
  the pipeline), the worst stream's; its ratio to one batch's inference: the median time of the
  Batcher's model runs in the window, at the sizes it actually ran (histogram recorded);
- memory (one long run, ``--memory-streams`` streams, stand-in): resident memory after the first
  1k frames (all streams together) against after ``--frames`` (10k).

Goals: fps ratio >= 0.9, latency p50 <= 1.5 x one batch's inference, memory growth < 5 %.

    python -m bench.multistream
    python -m bench.multistream --seconds 4 --warmup 2 --reps 1 --frames 2000 --cases stand-in

Prints a table and writes bench/results/multistream.json.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench._harness import MODELS_DIR, RESULTS, ROOT
from bench.live_latency import clip_frames
from bench.pipeline import rss_bytes
from edgefuse.apps.config import DetectionConfig
from edgefuse.apps.detection import make_detector
from edgefuse.apps.models import catalogue_info
from edgefuse.models.catalogue import get_entry
from edgefuse.runtime import open_session, resolve_source
from edgefuse.testing.mjpeg import MjpegServer, decode_number
from edgefuse.vision.streams.batching import Batcher, plan_batches
from edgefuse.vision.streams.multi import MultiPipeline, Stream
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import open_source

MODEL, SIZE = "shapes_yolov8", 256
DYNAMIC = MODELS_DIR / f"{MODEL}@{SIZE}.dynamic-batch.onnx"
STREAMS = (1, 2, 4, 8)
CALIBRATE = (1, 2, 4, 8)
GATES = {"fps_ratio": 0.9, "latency_ratio": 1.5, "memory_growth_pct": 5.0}
SLOTS = 1 << 16  # frame numbers the MJPEG number strip carries


# ---- the model ---------------------------------------------------------------------------------


def export_dynamic_batch() -> Path:
    """The shapes detector with a dynamic batch dimension (``edgefuse convert`` fixes every
    dimension, so torch exports it here), in a child process: torch never enters a measurement."""
    if not DYNAMIC.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "bench.multistream", "--export", str(DYNAMIC)],
                       check=True, cwd=ROOT)
    return DYNAMIC


def _export(path: Path) -> None:
    import torch

    module = get_entry(MODEL).build().eval()
    scratch = path.with_name(f".{path.name}.tmp")
    torch.onnx.export(module, (torch.zeros(1, 3, SIZE, SIZE),), str(scratch),
                      input_names=["images"], output_names=["output0"], opset_version=17,
                      dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
                      dynamo=False)
    os.replace(scratch, path)


def open_model(threads: int):
    """The session over the dynamic-batch export and a factory of the apps' detector task on it."""
    source = resolve_source(export_dynamic_batch())
    session = open_session(source, "cpu", threads=threads, validate=False)
    info = catalogue_info(get_entry(MODEL), "full")

    def task():
        detector = make_detector(session, info, source, DetectionConfig())
        detector.warm_up()
        return detector

    return session, task


def batch_of(feeds: dict, rows: int) -> dict:
    return {name: np.repeat(array, rows, axis=0) for name, array in feeds.items()}


def calibrate(threads: int, rounds: int = 25) -> dict:
    """The real model's median latency at each batch of ``CALIBRATE`` (the sizes alternate, one
    run each per round, so a shared host's drift reaches them all alike), and ``a + b * rows``
    fitted to it (least squares), for the stand-in."""
    session, task = open_model(threads)
    feeds, _ = task().preprocess(clip_frames()[0])
    batches = {rows: batch_of(feeds, rows) for rows in CALIBRATE}
    times: dict[int, list[float]] = {rows: [] for rows in CALIBRATE}
    for round_ in range(rounds + 1):
        for rows, batch in batches.items():
            start = time.perf_counter()
            session.run(batch)
            if round_:  # the first round warms up
                times[rows].append(time.perf_counter() - start)
    ms = {rows: statistics.median(values) * 1e3 for rows, values in times.items()}
    b, a = np.polyfit(list(ms), list(ms.values()), 1)
    session.close()
    return {"batch_ms": ms, "a_ms": float(a), "b_ms": float(b)}


class BatchStandIn:
    """An accelerator stand-in that batches: ``run`` sleeps ``a + b * rows`` (the real model's
    cost on this host, fitted) and returns the real model's output for one frame, per row."""

    def __init__(self, outputs: dict, a_ms: float, b_ms: float) -> None:
        self.outputs, self.a, self.b = outputs, max(a_ms, 0.0) / 1e3, b_ms / 1e3

    def run(self, feeds: dict) -> dict:
        rows = next(iter(feeds.values())).shape[0]
        time.sleep(self.a + self.b * rows)
        return batch_of(self.outputs, rows)


class TimedRun:
    """``run`` with the duration and size of each call recorded while ``recording`` is set."""

    def __init__(self, run) -> None:
        self.run, self.recording = run, threading.Event()
        self.calls: list[tuple[int, float]] = []

    def __call__(self, feeds: dict) -> dict:
        start = time.perf_counter()
        outputs = self.run(feeds)
        if self.recording.is_set():
            self.calls.append((next(iter(feeds.values())).shape[0], time.perf_counter() - start))
        return outputs


# ---- the cameras -------------------------------------------------------------------------------


class Cameras:
    """``count`` MJPEG cameras serving the sample clip at ``fps`` from a child process; ``sent``
    holds each frame's send time (stream ``i``'s frame ``n`` at ``i * SLOTS + n % SLOTS``)."""

    def __init__(self, count: int, fps: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.sent = context.Array("d", count * SLOTS, lock=False)
        self._stop = context.Event()
        mine, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(count, fps, self.sent, self._stop,
                                                              theirs), daemon=True)
        self._process.start()
        self.urls: list[str] = mine.recv()

    def sent_at(self, stream: int, number: int) -> float:
        return self.sent[stream * SLOTS + number % SLOTS]

    def offered(self, start: float, end: float) -> int:
        """Frames the cameras sent between ``start`` and ``end`` (perf_counter), all together."""
        times = np.frombuffer(self.sent, dtype=np.float64)
        return int(((times >= start) & (times < end)).sum())

    def close(self) -> None:
        self._stop.set()
        self._process.join(10)


class _SharedTimes:
    """What ``MjpegServer.sent`` is written through: send times into the shared array."""

    def __init__(self, array, offset: int) -> None:
        self.array, self.offset = array, offset

    def __setitem__(self, number: int, when: float) -> None:
        self.array[self.offset + number % SLOTS] = when


def _serve(count: int, fps: float, sent, stop, reply) -> None:
    frames = clip_frames()
    servers = []
    for stream in range(count):
        server = MjpegServer(fps=fps, size=frames[0].shape[:2],
                             scene=lambda n, k=stream: frames[(n + 37 * k) % len(frames)].copy())
        server.sent = _SharedTimes(sent, stream * SLOTS)
        servers.append(server.start())
    reply.send([server.url for server in servers])
    stop.wait()
    for server in servers:
        server.stop()


# ---- one run (a worker process) ----------------------------------------------------------------


@dataclasses.dataclass
class Setup:
    streams: int
    case: str  # "stand-in" or "cpu"
    threads: int
    fps: float
    stand_in: tuple[float, float] | None  # a_ms, b_ms
    wait_ms: float | None = None  # the batcher's deadline (None: its default; 0: greedy)


def open_run(setup: Setup, cameras: Cameras, sink) -> tuple[MultiPipeline, TimedRun, int]:
    """The streams on ``cameras``, one batcher over the model, and the plan's largest batch;
    ``sink(stream, result)`` sees every result."""
    session, task = open_model(setup.threads)
    tasks = [task() for _ in range(setup.streams)]
    feeds, _ = tasks[0].preprocess(clip_frames()[0])
    run = session.run
    if setup.case == "stand-in":
        run = BatchStandIn(session.run(feeds), *setup.stand_in).run
    plan = plan_batches(session, setup.streams)
    timed = TimedRun(run)
    batcher = Batcher(timed, plan, streams=setup.streams,
                      wait_s=None if setup.wait_ms is None else setup.wait_ms / 1e3)
    batcher.rehearse(feeds)
    streams = [Stream(f"stream{i}", open_source(url), tasks[i],
                      [CallbackSink(lambda result, i=i: sink(i, result))])
               for i, url in enumerate(cameras.urls)]
    return MultiPipeline(streams, batcher=batcher, report_every=None), timed, plan.max_batch


def ceiling_fps(run, feeds: dict, rows: int, seconds: float) -> float:
    """The model alone at batch ``rows`` in a loop for ``seconds``: frames per second, from the
    median run (a shared host's bursts of other work move a total over the loop)."""
    batch = batch_of(feeds, rows)
    run(batch)
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        begun = time.perf_counter()
        run(batch)
        times.append(time.perf_counter() - begun)
    return rows / statistics.median(times)


def measure(setup: Setup, warmup_s: float, seconds: float, ceiling_s: float) -> dict:
    cameras = Cameras(setup.streams, setup.fps)
    latencies: list[list[float]] = [[] for _ in range(setup.streams)]
    measuring = threading.Event()

    def sink(stream: int, result) -> None:
        if measuring.is_set():
            number = decode_number(result.frame.image)
            latencies[stream].append(time.perf_counter() - cameras.sent_at(stream, number))

    try:
        multi, timed, max_batch = open_run(setup, cameras, sink)
        feeds, _ = multi.pipelines["stream0"].task.preprocess(clip_frames()[0])
        ceiling = ceiling_fps(timed.run, feeds, max_batch, ceiling_s)
        runner = threading.Thread(target=multi.run)
        runner.start()
        time.sleep(warmup_s)
        sizes_before = collections.Counter(multi.batcher.sizes)
        timed.recording.set()
        measuring.set()
        start = time.perf_counter()
        time.sleep(seconds)
        measuring.clear()
        timed.recording.clear()
        end = time.perf_counter()
        sizes = multi.batcher.sizes - sizes_before
        multi.stop()
        runner.join()
        multi.batcher.close()
        offered = cameras.offered(start, end) / (end - start)
    finally:
        cameras.close()
    frames = sum(len(values) for values in latencies)
    fps = frames / (end - start)
    batch_ms = statistics.median(s for rows, s in timed.calls for _ in range(rows)) * 1e3
    per_stream = [{"fps": len(values) / (end - start),
                   "p50_ms": float(np.percentile(values, 50) * 1e3),
                   "p95_ms": float(np.percentile(values, 95) * 1e3)} if values else {"fps": 0.0}
                  for values in latencies]
    p50 = max(row.get("p50_ms", 0.0) for row in per_stream)
    p95 = max(row.get("p95_ms", 0.0) for row in per_stream)
    return {"streams": setup.streams, "case": setup.case, "wait_ms": setup.wait_ms, "fps": fps,
            "offered_fps": offered,
            "ceiling_fps": ceiling, "ceiling_batch": max_batch,
            "fps_ratio": fps / min(ceiling, offered), "fps_over_ceiling": fps / ceiling,
            "latency_p50_ms": p50, "latency_p95_ms": p95, "batch_ms": batch_ms,
            "latency_ratio": p50 / batch_ms, "latency_p95_ratio": p95 / batch_ms,
            "batch_sizes": {str(k): v for k, v in sorted(sizes.items())},
            "starved_streams": sum(1 for values in latencies if not values),
            "per_stream": per_stream}


def soak(setup: Setup, frames: int) -> dict:
    """``frames`` results from all streams together; RSS after the first 1k (or a tenth of
    ``frames``, if fewer) and at the end."""
    cameras = Cameras(setup.streams, setup.fps)
    first = min(1000, frames // 10)
    lock = threading.Lock()
    counts = {"done": 0}
    samples: list[tuple[int, int]] = []
    holder: dict = {}

    def sink(stream: int, result) -> None:
        with lock:
            counts["done"] += 1
            done = counts["done"]
        if done == first or done % 500 == 0 or done == frames:
            samples.append((done, rss_bytes()))
        if done == frames:
            holder["multi"].stop()

    try:
        multi, _, _ = open_run(setup, cameras, sink)
        holder["multi"] = multi
        start = time.perf_counter()
        multi.run()
        seconds = time.perf_counter() - start
        multi.batcher.close()
    finally:
        cameras.close()
    at_first = next(rss for done, rss in samples if done == first)
    at_end = next(rss for done, rss in samples if done == frames)
    return {"streams": setup.streams, "case": setup.case, "frames": frames, "first": first,
            "seconds": seconds, "fps": frames / seconds,
            "rss_mb_first": at_first / 2**20, "rss_mb_end": at_end / 2**20,
            "growth_pct": (at_end - at_first) / at_first * 100,
            "samples": [(done, round(rss / 2**20, 2)) for done, rss in samples]}


# ---- the orchestration (this process measures nothing) -----------------------------------------


def worker(args: argparse.Namespace, *extra: str) -> dict:
    command = [sys.executable, "-m", "bench.multistream", "--threads", str(args.threads),
               "--fps", str(args.fps), *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(extra)}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _wait(text: str) -> float | None:
    """A ``--wait-ms`` value: milliseconds, or ``auto`` (None) for the Batcher's default."""
    return None if text.strip() == "auto" else float(text)


def run_all(args: argparse.Namespace) -> dict:
    export_dynamic_batch()
    calibration = worker(args, "--calibrate")
    stand_in = f"{calibration['a_ms'] + args.fixed_ms},{calibration['b_ms']}"
    print("model alone, batch -> ms: " + ", ".join(
        f"{rows}: {ms:.1f}" for rows, ms in calibration["batch_ms"].items())
        + f"; stand-in sleeps {calibration['a_ms'] + args.fixed_ms:.2f} + "
          f"{calibration['b_ms']:.2f} ms x rows")
    cases = [c for c in ("stand-in", "cpu") if c in args.cases.split(",")]
    waits = [_wait(w) for w in args.wait_ms.split(",")]
    streams = [int(n) for n in args.streams.split(",")]
    runs: dict[str, list[dict]] = collections.defaultdict(list)
    for rep in range(args.reps):
        for case in cases:
            settings = [(count, wait) for count in streams for wait in waits]
            for count, wait in (settings if rep % 2 == 0 else list(reversed(settings))):
                row = worker(args, "--measure", case, str(count), f"--stand-in={stand_in}",
                             f"--wait-ms={'auto' if wait is None else wait}",
                             "--seconds", str(args.seconds),
                             "--warmup", str(args.warmup))
                key = f"{case} N={count} " + ("auto" if wait is None else
                                              f"wait {wait:g}ms" if wait else "greedy")
                runs[key].append(row)
                print(f"  rep {rep + 1}/{args.reps} {key}: {row['fps']:.1f} fps "
                      f"(ceiling {row['ceiling_fps']:.1f}), latency p50 "
                      f"{row['latency_p50_ms']:.1f} ms, batch {row['batch_ms']:.1f} ms")
    rows = {key: summarise(values) for key, values in runs.items()}
    memory = None
    if args.frames:
        memory = worker(args, "--soak", str(args.memory_streams), str(args.frames),
                        f"--stand-in={stand_in}")
    return {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "python": platform.python_version()},
            "model": f"{MODEL}@{SIZE} (dynamic batch)", "stream_fps": args.fps,
            "seconds": args.seconds, "warmup_s": args.warmup, "reps": args.reps,
            "threads": args.threads, "calibration": calibration, "fixed_ms": args.fixed_ms,
            "gates": GATES,
            "rows": rows, "runs": runs, "memory": memory}


def summarise(values: list[dict]) -> dict:
    numeric = [k for k, v in values[0].items() if isinstance(v, float)]
    row = {k: statistics.median(v[k] for v in values) for k in numeric}
    sizes: collections.Counter[str] = collections.Counter()
    for value in values:
        sizes.update(value["batch_sizes"])
    row.update(streams=values[0]["streams"], case=values[0]["case"],
               batch_sizes=dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))))
    row["starved_streams"] = max(value["starved_streams"] for value in values)
    row["pass"] = bool(row["fps_ratio"] >= GATES["fps_ratio"] and not row["starved_streams"]
                       and row["latency_ratio"] <= GATES["latency_ratio"])
    return row


def render(results: dict) -> str:
    lines = [f"\n{'case':<22} {'fps':>6} {'offered':>7} {'ceiling':>7} {'ratio':>6} "
             f"{'p50 ms':>7} {'p95 ms':>7} {'batch ms':>8} {'p50 x':>6} {'p95 x':>6}  batch sizes"]
    for key, row in results["rows"].items():
        lines.append(
            f"{key:<22} {row['fps']:6.1f} {row['offered_fps']:7.1f} {row['ceiling_fps']:7.1f} "
            f"{row['fps_ratio']:6.2f} {row['latency_p50_ms']:7.1f} {row['latency_p95_ms']:7.1f} "
            f"{row['batch_ms']:8.1f} {row['latency_ratio']:6.2f} {row['latency_p95_ratio']:6.2f}"
            f"  {' '.join(f'{k}:{v}' for k, v in row['batch_sizes'].items())}"
            + (f" ({row['starved_streams']} streams got no frame)"
               if row["starved_streams"] else ""))
    lines.append(f"(medians over {results['reps']} reps; ratio = fps / min(ceiling, offered), "
                 f"goal >= {GATES['fps_ratio']}; p50 x, p95 x = the worst stream's latency over "
                 f"the median batch inference, goal p50 x <= {GATES['latency_ratio']}; batch "
                 f"sizes: size:batches run, summed over reps)")
    memory = results["memory"]
    if memory:
        lines.append(f"memory, {memory['case']} N={memory['streams']}: RSS "
                     f"{memory['rss_mb_first']:.1f} MB after {memory['first']} frames -> "
                     f"{memory['rss_mb_end']:.1f} MB after "
                     f"{memory['frames']} ({memory['growth_pct']:+.2f} %, goal < "
                     f"{GATES['memory_growth_pct']} %), {memory['fps']:.1f} fps")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default=",".join(map(str, STREAMS)))
    parser.add_argument("--cases", default="stand-in,cpu")
    parser.add_argument("--fps", type=float, default=25.0, help="each camera's frame rate")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="left out per run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--frames", type=int, default=10000,
                        help="frames of the memory run (0: none)")
    parser.add_argument("--memory-streams", type=int, default=4)
    parser.add_argument("--fixed-ms", type=float, default=0.0,
                        help="a launch cost per model run added to the stand-in (an NPU's)")
    parser.add_argument("--ceiling-seconds", type=float, default=2.0)
    parser.add_argument("--wait-ms", default="auto,0",
                        help="the batcher's deadlines to compare (auto: its default, half an "
                             "inference; 0: greedy)")
    # one run in this process (what the orchestration starts)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--calibrate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--soak", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stand-in", help=argparse.SUPPRESS)
    args = parser.parse_args()

    stand_in = tuple(map(float, args.stand_in.split(","))) if args.stand_in else None
    if args.export:
        _export(Path(args.export))
    elif args.calibrate:
        print(json.dumps(calibrate(args.threads)))
    elif args.measure:
        setup = Setup(int(args.measure[1]), args.measure[0], args.threads, args.fps, stand_in,
                      _wait(args.wait_ms))
        print(json.dumps(measure(setup, args.warmup, args.seconds, args.ceiling_seconds)))
    elif args.soak:
        setup = Setup(args.soak[0], "stand-in", args.threads, args.fps, stand_in)
        print(json.dumps(soak(setup, args.soak[1])))
    else:
        results = run_all(args)
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / "multistream.json"
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(render(results))
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
