"""Benchmark the apps' pipeline: end-to-end FPS against the same session's model-only
throughput, the serial loop beside it, NMS on a YOLOv8-sized output, and a memory soak.

Part 1, pipeline (one process, one session per case, ONNX Runtime CPU with ``--threads``; the
trained shapes models run on the package's sample clip (320 x 240, the demo's), the full-size
catalogue models on a drawn 640 x 480 clip; the catalogue models are exported once by ``edgefuse
convert`` in a child process and cached under bench/results/models, so PyTorch is not loaded where
anything is measured): the model-only throughput is ``session.run`` in a loop on one preprocessed
frame of the clip, the ceiling; the pipeline is the app as users run it (the sample clip decoded,
letterboxed, inferred, decoded, drawn into an mp4 and logged to JSON Lines, stages on threads); the
serial loop is the same stages in one thread, as most reference apps run them. The three alternate
in rotating order for ``--reps`` repetitions; each is reported as its median, the ratios as medians
of the ratios within a repetition (paired, so the machine's drift cancels). Gate: pipeline >= 0.85 x
model-only on every case with a real session. The "(stand-in)" cases replace the session by
``StandIn``, which sleeps for the CPU session's latency and replays its outputs: inference off the
host CPU, as on the board's NPU, where pipelining shows what it overlaps.

Part 2, NMS: ``edgefuse.vision.detect.decode.decode`` (candidate filter + class-aware NMS + mapping
back) on a [1, 84, 8400] YOLOv8 output, 80 classes: a realistic one (20 objects, each lighting
tens of anchors; background scores from sigmoid(N(-6, 1.5))) and the worst case (uniform random
scores: all 8400 anchors are candidates). Gate: median < 2 ms on the realistic output. NMS
alone is also timed beside OpenCV's C++ ``cv2.dnn.NMSBoxesBatched`` on the same candidates
(same kept boxes, tests/test_nms.py), the peer a numpy NMS has to answer to.

Part 3, ``--soak N``: N frames through the detection pipeline (the clip looped, re-decoded each
time, into an mp4 and JSON Lines), resident memory sampled every 250 frames; growth is measured
from the end of the warm-up (the first 10 %, at least 500 frames) to the end. Gate: < 5 %.

    python -m bench.pipeline                     # parts 1 and 2
    python -m bench.pipeline --frames 120 --reps 3 --threads 1
    python -m bench.pipeline --cases ''           # part 2 only
    python -m bench.pipeline --soak 10000         # part 3 only

The drawn clip (bench/results/sample_clip.mp4, 640 x 480, 30 fps) is drawn here with OpenCV:
moving circles and squares over a noisy gradient. Prints a table and writes
bench/results/pipeline.json (pipeline_soak.json for the soak).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from bench._harness import MODELS_DIR, RESULTS, ROOT
from edgefuse.apps.config import DetectionConfig, SegmentationConfig
from edgefuse.apps.detection import make_detector
from edgefuse.apps.models import catalogue_info
from edgefuse.apps.segmentation import make_segmenter
from edgefuse.models.catalogue import get_entry
from edgefuse.nms import nms
from edgefuse.preprocess import Geometry
from edgefuse.runtime import open_session, resolve_source
from edgefuse.vision.detect.decode import candidates_yolov8, decode
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink, JsonlSink, VideoSink
from edgefuse.vision.streams.sources import open_source

GATES = {"pipeline_ratio": 0.85, "nms_ms": 2.0, "soak_growth_pct": 5.0}
CLIP = RESULTS / "sample_clip.mp4"
SOAK_CLIP = RESULTS / "soak_clip.mp4"


@dataclasses.dataclass(frozen=True)
class Case:
    app: str
    model: str
    size: int
    offload: bool = False  # inference on an accelerator stand-in (see StandIn)
    shipped_clip: bool = False  # the package's sample clip (the trained models' scenes)

    @property
    def name(self) -> str:
        return f"{self.app} {self.model}@{self.size}" + (" (stand-in)" if self.offload else "")


CASES = (
    Case("detection", "shapes_yolov8", 256, shipped_clip=True),
    Case("segmentation", "shapes_deeplabv3plus", 256, shipped_clip=True),
    Case("detection", "yolov8n", 320),
    Case("detection", "yolov8n", 640),
    Case("segmentation", "deeplabv3plus_mobilenetv2", 256),
    Case("detection", "yolov8n", 320, offload=True),
    Case("segmentation", "deeplabv3plus_mobilenetv2", 256, offload=True),
)


class StandIn:
    """An accelerator stand-in for the offloaded cases: ``run`` sleeps for the CPU session's
    median latency and returns that session's outputs for the clip's first frame. On the board
    the NPU runs the model while the host CPU is free, which a CPU session cannot show on a
    2-core machine: there, inference and the other stages compete for the same cores."""

    def __init__(self, session, feeds: dict) -> None:
        times = []
        for _ in range(7):
            start = time.perf_counter()
            self.outputs = session.run(feeds)
            times.append(time.perf_counter() - start)
        self.seconds = statistics.median(times)

    def run(self, feeds: dict) -> dict:
        time.sleep(self.seconds)
        return self.outputs


# ---- the clip ----------------------------------------------------------------------------------


def sample_clip(path: Path, frames: int = 300, size: tuple[int, int] = (480, 640)) -> Path:
    """Moving circles and squares over a noisy gradient (so the codec has work to do)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = size
    rng = np.random.default_rng(0)
    gradient = np.linspace(40, 200, width, dtype=np.float32)[np.newaxis, :, np.newaxis]
    background = np.broadcast_to(gradient, (height, width, 3)).astype(np.uint8)
    shapes = [(rng.uniform(0, width), rng.uniform(0, height), rng.uniform(-6, 6),
               rng.uniform(-4, 4), int(rng.integers(15, 60)), int(rng.integers(0, 2)),
               tuple(int(c) for c in rng.integers(0, 256, 3))) for _ in range(8)]
    tmp = path.with_name(f".{path.name}.tmp.mp4")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (width, height))
    for i in range(frames):
        frame = background.copy()
        noise = rng.integers(-12, 13, (height, width, 1), dtype=np.int16)
        frame = np.clip(frame.astype(np.int16) + noise, 0, 255).astype(np.uint8)
        for x, y, dx, dy, r, square, colour in shapes:
            cx, cy = int((x + dx * i) % width), int((y + dy * i) % height)
            if square:
                cv2.rectangle(frame, (cx - r, cy - r), (cx + r, cy + r), colour, -1)
            else:
                cv2.circle(frame, (cx, cy), r, colour, -1)
        writer.write(frame)
    writer.release()
    os.replace(tmp, path)
    return path


def first_frame(path: Path) -> np.ndarray:
    capture = cv2.VideoCapture(str(path))
    ok, frame = capture.read()
    capture.release()
    if not ok:
        raise RuntimeError(f"cannot read {path}")
    return frame


# ---- part 1 ------------------------------------------------------------------------------------


def export_onnx(case: Case) -> Path:
    """The catalogue model exported at ``case.size`` by ``edgefuse convert`` in a child process,
    cached: PyTorch never enters the measured process (an app on a board does not import it)."""
    path = MODELS_DIR / f"{case.model}@{case.size}.onnx"
    if not path.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "edgefuse", "convert",
                        f"edgefuse.models:{case.model}", "-o", str(path),
                        "--input", f"1,3,{case.size},{case.size}"],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def open_task(case: Case, threads: int):
    """The app's own task over the catalogue model exported at ``case.size``."""
    info = catalogue_info(get_entry(case.model), "full")
    info = dataclasses.replace(info, preprocess=dataclasses.replace(
        info.preprocess, size=(case.size, case.size)))
    source = resolve_source(export_onnx(case))
    session = open_session(source, "cpu", threads=threads, validate=False)
    if case.app == "detection":
        task = make_detector(session, info, source, DetectionConfig())
    else:
        task = make_segmenter(session, info, source, SegmentationConfig())
    task.warm_up()
    return session, task


def model_only_fps(session, feeds: dict, frames: int) -> float:
    start = time.perf_counter()
    for _ in range(frames):
        session.run(feeds)
    return frames / (time.perf_counter() - start)


def pipeline_fps(task, clip: Path, frames: int, concurrent: bool) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory(prefix="edgefuse-bench-") as scratch:
        sinks = [JsonlSink(Path(scratch) / "out.jsonl"), VideoSink(Path(scratch) / "out.mp4")]
        summary = Pipeline(open_source(clip), task, sinks, max_frames=frames,
                           report_every=None).run(concurrent=concurrent)
    stages = {name: round(s.p50_ms, 2) for name, s in summary.stats.totals.items()}
    return summary.stats.mean_fps, stages


def measure_case(case: Case, clip: Path, frames: int, reps: int, threads: int) -> dict:
    session, task = open_task(case, threads)
    real = session
    try:
        feeds, _ = task.preprocess(first_frame(clip))
        model_only_fps(session, feeds, 3)
        if case.offload:
            session = task.session = StandIn(real, feeds)
        runs: dict[str, list[float]] = {"model_only": [], "pipeline": [], "serial": []}
        ratios: dict[str, list[float]] = {"pipeline": [], "serial": []}
        stages: dict[str, dict] = {}
        modes = list(runs)
        for rep in range(reps):
            order = modes[rep % 3:] + modes[:rep % 3]
            this: dict[str, float] = {}
            for mode in order:
                if mode == "model_only":
                    this[mode] = model_only_fps(session, feeds, frames)
                else:
                    this[mode], stages[mode] = pipeline_fps(task, clip, frames,
                                                            mode == "pipeline")
                runs[mode].append(this[mode])
            for mode in ratios:
                ratios[mode].append(this[mode] / this["model_only"])
            print(f"  {case.name} rep {rep + 1}/{reps}: " + ", ".join(
                f"{m} {this[m]:.1f} fps" for m in modes))
    finally:
        real.close()
    return {
        "case": case.name, "frames": frames, "reps": reps,
        "fps": {mode: statistics.median(values) for mode, values in runs.items()},
        "fps_runs": runs,
        "ratio": {mode: statistics.median(values) for mode, values in ratios.items()},
        "stage_p50_ms": stages,
    }


# ---- part 2 ------------------------------------------------------------------------------------


def anchors_640() -> np.ndarray:
    centres = []
    for stride in (8, 16, 32):
        cells = 640 // stride
        grid = (np.arange(cells) + 0.5) * stride
        xs, ys = np.meshgrid(grid, grid)
        centres.append(np.stack([xs.ravel(), ys.ravel()], axis=1))
    return np.concatenate(centres)  # [8400, 2]


def yolov8_realistic(rng: np.random.Generator, objects: int = 20) -> np.ndarray:
    centres = anchors_640()
    count = len(centres)
    out = np.zeros((1, 84, count), np.float32)
    out[0, 0:2] = centres.T
    out[0, 2:4] = rng.uniform(8, 64, (2, count))
    logits = rng.normal(-6.0, 1.5, (80, count))
    out[0, 4:] = 1 / (1 + np.exp(-logits))
    for _ in range(objects):
        cx, cy = rng.uniform(40, 600, 2)
        w, h = rng.uniform(30, 200, 2)
        near = np.flatnonzero((np.abs(centres[:, 0] - cx) < w / 4)
                              & (np.abs(centres[:, 1] - cy) < h / 4))
        cls = int(rng.integers(0, 80))
        out[0, 0, near] = cx + rng.normal(0, w * 0.03, len(near))
        out[0, 1, near] = cy + rng.normal(0, h * 0.03, len(near))
        out[0, 2, near] = w * rng.uniform(0.9, 1.1, len(near))
        out[0, 3, near] = h * rng.uniform(0.9, 1.1, len(near))
        out[0, 4 + cls, near] = rng.uniform(0.3, 0.95, len(near))
    return out


def yolov8_worst(rng: np.random.Generator) -> np.ndarray:
    out = np.zeros((1, 84, 8400), np.float32)
    out[0, 0:2] = rng.uniform(0, 640, (2, 8400))
    out[0, 2:4] = rng.uniform(8, 200, (2, 8400))
    out[0, 4:] = rng.random((80, 8400))
    return out


def _median_ms(call, runs: int) -> float:
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def nms_alone(output: np.ndarray, runs: int) -> tuple[float, float]:
    """Median ms of edgefuse's NMS and of OpenCV's NMSBoxesBatched on the same candidates."""
    boxes, scores, classes = candidates_yolov8(output, 0.25)
    ours = _median_ms(lambda: nms(boxes, scores, 0.45, classes, max_det=300), runs)
    xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    labels = classes.astype(np.int32)
    opencv = _median_ms(lambda: cv2.dnn.NMSBoxesBatched(xywh, scores, labels, 0.25, 0.45,
                                                        top_k=300), runs)
    return ours, opencv


def nms_bench(runs: int) -> dict:
    rng = np.random.default_rng(0)
    geometry = Geometry((480, 640), (640, 640), 1.0, 1.0, 0, 80)
    results = {}
    for name, output in (("realistic", yolov8_realistic(rng)), ("worst", yolov8_worst(rng))):
        outputs = {"output0": output}
        candidates = int((output[0, 4:].max(axis=0) > 0.25).sum())
        decode(outputs, "yolov8", geometry)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            kept = decode(outputs, "yolov8", geometry)
            times.append((time.perf_counter() - start) * 1e3)
        ours, opencv = nms_alone(output, runs)
        results[name] = {"candidates": candidates, "kept": len(kept),
                         "median_ms": statistics.median(times),
                         "p95_ms": float(np.percentile(times, 95)),
                         "nms_only_median_ms": ours, "opencv_nms_median_ms": opencv}
        print(f"  nms {name}: {candidates} candidates -> {len(kept)} boxes, decode + NMS "
              f"median {results[name]['median_ms']:.3f} ms; NMS alone {ours:.3f} ms, "
              f"OpenCV's NMSBoxesBatched {opencv:.3f} ms")
    return results


# ---- part 3 ------------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def looped(clip: Path) -> Iterator[np.ndarray]:
    while True:
        capture = cv2.VideoCapture(str(clip))
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            yield frame
        capture.release()


def soak(frames: int, threads: int, model: str) -> dict:
    clip = sample_clip(SOAK_CLIP, frames=300, size=(240, 320))
    name, _, size = model.partition("@")
    session, task = open_task(Case("detection", name, int(size or 320)), threads)
    warm = max(500, frames // 10)
    samples: list[tuple[int, int]] = []

    def sample(result) -> None:
        done = result.index + 1
        if done % 250 == 0 or done == warm:
            samples.append((done, rss_bytes()))

    try:
        with tempfile.TemporaryDirectory(prefix="edgefuse-soak-") as scratch:
            sinks = [JsonlSink(Path(scratch) / "soak.jsonl"),
                     VideoSink(Path(scratch) / "soak.mp4"), CallbackSink(sample)]
            start = time.perf_counter()
            summary = Pipeline(open_source(looped(clip)), task, sinks, max_frames=frames,
                               report_every=30.0,
                               report=lambda s: print(f"  soak: {s.line()}")).run()
            seconds = time.perf_counter() - start
    finally:
        session.close()
    at_warm = next(rss for done, rss in samples if done >= warm)
    final = samples[-1][1]
    after = [rss for done, rss in samples if done >= warm]
    result = {
        "frames": summary.stats.frames, "model": model, "seconds": seconds,
        "fps": summary.stats.mean_fps, "warmup_frames": warm,
        "rss_mb_at_warmup": at_warm / 2**20, "rss_mb_end": final / 2**20,
        "rss_mb_max_after_warmup": max(after) / 2**20,
        "growth_pct": (final - at_warm) / at_warm * 100,
        "samples": [(done, round(rss / 2**20, 2)) for done, rss in samples],
    }
    print(f"  soak: {result['frames']} frames in {seconds:.0f} s; RSS "
          f"{result['rss_mb_at_warmup']:.1f} MB after warm-up -> {result['rss_mb_end']:.1f} MB "
          f"at the end ({result['growth_pct']:+.2f} %)")
    return result


# ---- report ------------------------------------------------------------------------------------


def render(results: dict) -> str:
    lines = []
    if "pipeline" in results:
        lines += ["", f"{'case':<55} {'model-only':>10} {'pipeline':>9} {'ratio':>6} "
                      f"{'serial':>7} {'ratio':>6}"]
        for row in results["pipeline"]:
            fps, ratio = row["fps"], row["ratio"]
            lines.append(f"{row['case']:<55} {fps['model_only']:>10.1f} {fps['pipeline']:>9.1f} "
                         f"{ratio['pipeline']:>6.2f} {fps['serial']:>7.1f} {ratio['serial']:>6.2f}")
        lines.append("(frames per second; ratio = paired median against model-only)")
    if "nms" in results:
        lines.append("")
        for name, row in results["nms"].items():
            lines.append(f"decode + NMS, [1, 84, 8400] {name:<9}: {row['candidates']:>5} "
                         f"candidates, median {row['median_ms']:.3f} ms, "
                         f"p95 {row['p95_ms']:.3f} ms (NMS alone {row['nms_only_median_ms']:.3f} "
                         f"ms; OpenCV's {row['opencv_nms_median_ms']:.3f} ms)")
    if "soak" in results:
        row = results["soak"]
        lines += ["", f"soak {row['frames']} frames ({row['model']}): RSS "
                      f"{row['rss_mb_at_warmup']:.1f} -> {row['rss_mb_end']:.1f} MB "
                      f"({row['growth_pct']:+.2f} %) after a {row['warmup_frames']}-frame warm-up"]
    for name, (ok, detail) in results.get("gates", {}).items():
        lines.append(f"gate {name}: {'PASS' if ok else 'FAIL'} ({detail})")
    return "\n".join(lines)


def gates(results: dict) -> dict[str, tuple[bool, str]]:
    found = {}
    if "pipeline" in results:
        real = [row for row in results["pipeline"] if "stand-in" not in row["case"]]
        worst = min(real or results["pipeline"], key=lambda row: row["ratio"]["pipeline"])
        found["pipeline_ratio"] = (worst["ratio"]["pipeline"] >= GATES["pipeline_ratio"],
                                   f"lowest {worst['ratio']['pipeline']:.2f} ({worst['case']}) "
                                   f">= {GATES['pipeline_ratio']}")
    if "nms" in results:
        median = results["nms"]["realistic"]["median_ms"]
        found["nms_ms"] = (median < GATES["nms_ms"], f"{median:.3f} ms < {GATES['nms_ms']} ms")
    if "soak" in results:
        growth = results["soak"]["growth_pct"]
        found["soak_growth_pct"] = (growth < GATES["soak_growth_pct"],
                                    f"{growth:+.2f} % < {GATES['soak_growth_pct']} %")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(str(i) for i in range(len(CASES))),
                        help="indices into: " + "; ".join(
                            f"{i}={c.name}" for i, c in enumerate(CASES)))
    parser.add_argument("--frames", type=int, default=90, help="frames per measurement")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--nms-runs", type=int, default=300)
    parser.add_argument("--soak", type=int, metavar="FRAMES", help="run the memory soak only")
    parser.add_argument("--soak-model", default="yolov8n@96",
                        help="catalogue detector@size for the soak (default yolov8n@96)")
    parser.add_argument("--json", help="default: bench/results/pipeline.json (pipeline_soak.json "
                                        "with --soak)")
    args = parser.parse_args()

    results: dict = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                 "threads": args.threads, "opencv": cv2.__version__}}
    if args.soak:
        print(f"[soak] {args.soak} frames")
        results["soak"] = soak(args.soak, args.threads, args.soak_model)
    else:
        cases = [CASES[int(i)] for i in args.cases.split(",") if i.strip()]
        if cases:
            clip = sample_clip(CLIP)
            print(f"[pipeline] {clip.name}, {args.frames} frames x {args.reps} reps")
            results["pipeline"] = [
                measure_case(c, SAMPLE_CLIP if c.shipped_clip else clip, args.frames, args.reps,
                             args.threads) for c in cases]
        print("[nms]")
        results["nms"] = nms_bench(args.nms_runs)
    found = gates(results)
    results["gates"] = {k: {"ok": ok, "detail": d} for k, (ok, d) in found.items()}
    out = Path(args.json or RESULTS / ("pipeline_soak.json" if args.soak else "pipeline.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(render({**results, "gates": found}))
    print(f"\nwrote {out}")
    return 0 if all(ok for ok, _ in found.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
