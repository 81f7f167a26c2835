"""Benchmark latency on a live stream: the default frames-in-flight policy against in_flight 1/2/3.

A camera app must show the present: on a stream faster than the model, every frame beyond what
keeps the slowest stage busy only waits, and latency grows with it. Here the kit's MJPEG server
(edgefuse.testing.mjpeg) streams the package's sample clip on 127.0.0.1 at ``--fps`` (faster
than the model), each frame numbered; the detection app's own task (the trained shapes YOLOv8,
ONNX Runtime CPU, ``--threads``) reads it as a live source, and a sink reads each result's frame
number back, so latency is end to end: from the server sending the frame to its result leaving
the pipeline (network, decoding, waiting in the slot and in queues included).

Cases: the CPU session, and a stand-in (bench.pipeline.StandIn: sleeps for the CPU session's
median latency and replays its outputs), i.e. inference off the host CPU as on the board's NPU.
Each setting runs ``--seconds`` after ``--warmup`` seconds (the default policy tunes itself in
its first seconds; those frames are left out), settings alternate in rotating order for
``--reps`` repetitions, and each figure is the median over repetitions. The latency ratio the
gate reads is latency p50 over the inference p50 of the same run (the infer stage inside the
pipeline), so a machine whose load drifts between runs does not move it; the model alone
(``session.run`` in a loop on one preprocessed frame, before the runs) is printed beside it.

Gate (issue 16 §3), per case: the default's latency p50 <= 1.5 x the inference p50, at >= 0.95 x
the throughput of the lowest-latency fixed setting.

    python -m bench.live_latency
    python -m bench.live_latency --seconds 10 --reps 3 --fps 60 --threads 1

Prints a table and writes bench/results/live_latency.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import threading
import time

import cv2
import numpy as np

from bench._harness import RESULTS
from bench.pipeline import Case, StandIn, open_task
from edgefuse.testing.mjpeg import MjpegServer, decode_number
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink
from edgefuse.vision.streams.sources import open_source

MODEL = Case("detection", "shapes_yolov8", 256, shipped_clip=True)
SETTINGS = (None, 1, 2, 3)  # None: the default policy
GATES = {"latency_ratio": 1.5, "throughput_ratio": 0.95}


def clip_frames(path=SAMPLE_CLIP) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def inference_p50_ms(session, task, frame: np.ndarray, runs: int = 50) -> float:
    feeds, _ = task.preprocess(frame)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(server: MjpegServer, task, in_flight: int | None, warmup_s: float,
            seconds: float) -> dict:
    """One run of ``seconds`` after ``warmup_s`` at this setting: latency p50/p95, fps."""
    latencies: list[float] = []
    measuring = threading.Event()

    def record(result) -> bool:
        if measuring.is_set():
            latencies.append(time.perf_counter() - server.sent[decode_number(result.frame.image)])
        return True

    pipeline = Pipeline(open_source(server.url), task, [CallbackSink(record)],
                        in_flight=in_flight, report_every=None)
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(summary=pipeline.run()))
    runner.start()
    time.sleep(warmup_s)
    measuring.set()
    start = time.perf_counter()
    time.sleep(seconds)
    measuring.clear()
    elapsed = time.perf_counter() - start
    limit = pipeline.in_flight
    pipeline.stop()
    runner.join()
    infer = outcome["summary"].stats.totals["infer"]
    values = np.array(latencies) * 1e3
    p50 = float(np.percentile(values, 50))
    return {"latency_p50_ms": p50, "latency_p95_ms": float(np.percentile(values, 95)),
            "latency_over_infer": p50 / float(infer.p50_ms),
            "fps": len(latencies) / elapsed, "frames": len(latencies),
            "in_flight_at_end": limit, "infer_in_pipeline_p50_ms": float(infer.p50_ms)}


def run_case(name: str, task, infer_ms: float, server: MjpegServer, args) -> dict:
    runs: dict[str, list[dict]] = {label(s): [] for s in SETTINGS}
    for rep in range(args.reps):
        order = SETTINGS if rep % 2 == 0 else tuple(reversed(SETTINGS))
        for setting in order:
            runs[label(setting)].append(measure(server, task, setting, args.warmup, args.seconds))
    rows = {key: {field: statistics.median(r[field] for r in values)
                  for field in values[0]} for key, values in runs.items()}
    fixed = [label(s) for s in SETTINGS if s is not None]
    lowest = min(fixed, key=lambda key: rows[key]["latency_p50_ms"])
    default = rows[label(None)]
    gate = {"latency_ratio": default["latency_over_infer"],
            "throughput_ratio": default["fps"] / rows[lowest]["fps"],
            "lowest_latency_setting": lowest}
    gate["pass"] = bool(gate["latency_ratio"] <= GATES["latency_ratio"]
                        and gate["throughput_ratio"] >= GATES["throughput_ratio"])
    return {"case": name, "inference_p50_ms": infer_ms, "settings": rows, "runs": runs,
            "gate": gate}


def label(setting: int | None) -> str:
    return "default" if setting is None else f"in_flight={setting}"


def print_case(result: dict) -> None:
    print(f"\n{result['case']}: inference p50 {result['inference_p50_ms']:.1f} ms (model alone)")
    print(f"  {'setting':<12} {'lat p50':>8} {'lat p95':>8} {'infer p50':>9} {'x infer':>8} "
          f"{'fps':>7} {'in flight':>9}")
    for key, row in result["settings"].items():
        print(f"  {key:<12} {row['latency_p50_ms']:8.1f} {row['latency_p95_ms']:8.1f} "
              f"{row['infer_in_pipeline_p50_ms']:9.1f} {row['latency_over_infer']:8.2f} "
              f"{row['fps']:7.1f} {row['in_flight_at_end']:9.0f}")
    print("  (ms; infer p50 and x infer: the infer stage of the same run)")
    gate = result["gate"]
    print(f"  default: latency {gate['latency_ratio']:.2f}x inference (gate <= "
          f"{GATES['latency_ratio']}), throughput {gate['throughput_ratio']:.3f}x "
          f"{gate['lowest_latency_setting']} (gate >= {GATES['throughput_ratio']}): "
          f"{'PASS' if gate['pass'] else 'FAIL'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fps", type=float, default=60.0, help="the stream's frame rate")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured per setting")
    parser.add_argument("--warmup", type=float, default=3.0, help="left out per setting")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cases", default="cpu,stand-in")
    args = parser.parse_args()

    frames = clip_frames()
    session, task = open_task(MODEL, args.threads)
    infer_ms = inference_p50_ms(session, task, frames[0])
    server = MjpegServer(fps=args.fps, size=frames[0].shape[:2],
                         scene=lambda number: frames[number % len(frames)].copy()).start()
    results = []
    try:
        if "cpu" in args.cases.split(","):
            results.append(run_case(f"{MODEL.name} cpu", task, infer_ms, server, args))
            print_case(results[-1])
        if "stand-in" in args.cases.split(","):
            feeds, _ = task.preprocess(frames[0])
            stand_in = StandIn(session, feeds)
            task.session = stand_in
            results.append(run_case(f"{MODEL.name} (stand-in)", task,
                                    stand_in.seconds * 1e3, server, args))
            print_case(results[-1])
    finally:
        server.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "live_latency.json"
    out.write_text(json.dumps({
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version()},
        "stream_fps": args.fps, "seconds": args.seconds, "warmup_s": args.warmup,
        "reps": args.reps, "threads": args.threads, "gates": GATES, "cases": results,
    }, indent=2))
    print(f"\nwrote {out}")
    return 0 if all(r["gate"]["pass"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
