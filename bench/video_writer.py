"""Benchmark what writing video costs the detection app, and what the clip ring holds.

Part 1, the app's frame rate with a video sink against without one, at 720p and 1080p: the
detection pipeline as the app runs it (the clip decoded, letterboxed, inferred on ONNX Runtime
CPU with ``--threads``, decoded, tracked by nothing; stages on threads), over a drawn clip of
moving shapes on a noisy gradient (bench.pipeline's, at 1280x720 and 1920x1080; the noise makes
the encoder work harder than a calm camera would). Sinks, each in a fresh process:

- ``none``: no video sink (the baseline; no frame is even drawn),
- ``draw``: the frames drawn (boxes, labels) for a sink that writes nothing: the part of any video
  sink's cost that is not the writer's,
- ``h264``: ``--save out.mp4``, H.264 through PyAV in the writer's own thread (what apps write),
- ``mp4v``: the same through OpenCV's writer (the fallback without PyAV, for comparison),
- ``clips``: the event clip recorder (every frame encoded into the ring; no event fires).

The sinks alternate in rotating order for ``--reps`` repetitions; each is reported as its median
frame rate and its paired ratio to ``none`` measured in the same repetition (the machine's drift
cancels). The writer's cost is ``1 - ratio``. Goal (issue 28): at most 10 %.

Part 2 (``--no-app``: this part alone), the encoder's CPU time per frame
(``time.process_time``, all of libx264's threads) at 720p and 1080p, alone in a process: the
budget a host must have spare for the writer to cost nothing. And the clip ring's memory:
1080p frames encoded as the recorder encodes them (keyframes every second), ``pre_s = 5``; the
ring's payload bytes, sampled every frame after the first 10 s, against what 5 s of raw BGR
frames would take, for the noisy clip and for a calm one (the package's sample clip scaled to
1080p): the two ends of the range.

    python -m bench.video_writer                          # both parts
    python -m bench.video_writer --no-app                 # part 2 only
    python -m bench.video_writer --frames 120 --reps 3 --threads 2 --sizes 720,1080

Prints a table and writes bench/results/video_writer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2

from bench._harness import RESULTS, ROOT
from bench.pipeline import Case, open_task, sample_clip
from edgefuse.vision.media import video_file
from edgefuse.vision.media.clips import ClipOptions, ClipRecorder
from edgefuse.vision.media.h264 import H264Encoder
from edgefuse.vision.media.ring import PacketRing
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink, VideoSink
from edgefuse.vision.streams.sources import open_source

SIZES = {720: (720, 1280), 1080: (1080, 1920)}
SINKS = ("none", "draw", "h264", "mp4v", "clips")
GOAL_COST = 0.10
CASE = Case("detection", "shapes_yolov8", 256)


def clip_for(size: int) -> Path:
    return sample_clip(RESULTS / f"video_clip_{size}p.mp4", frames=300, size=SIZES[size])


# ---- part 1: one measurement per process -------------------------------------------------------


def worker(size: int, sink: str, frames: int, threads: int) -> dict:
    """The app's pipeline over the ``size`` clip into ``sink``; its frame rate."""
    session, task = open_task(CASE, threads)
    try:
        with tempfile.TemporaryDirectory(prefix="edgefuse-bench-") as scratch:
            sinks = []
            if sink in ("h264", "mp4v"):
                if sink == "mp4v":
                    video_file.h264_available = lambda: False  # the fallback, as without PyAV
                    video_file._warned_fallback.set()
                sinks.append(VideoSink(Path(scratch) / "out.mp4"))
            elif sink == "clips":
                sinks.append(ClipRecorder(ClipOptions()))
            elif sink == "draw":
                sinks.append(CallbackSink(lambda result, image: None, image=True))
            summary = Pipeline(open_source(clip_for(size)), task, sinks, max_frames=frames,
                               report_every=None).run()
    finally:
        session.close()
    stages = {name: round(s.p50_ms, 2) for name, s in summary.stats.totals.items()}
    return {"fps": summary.stats.mean_fps, "stage_p50_ms": stages}


def measure_once(size: int, sink: str, frames: int, threads: int) -> dict:
    command = [sys.executable, "-m", "bench.video_writer", "--worker", f"{size}:{sink}",
               "--frames", str(frames), "--threads", str(threads)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-2000:] or "the worker failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_size(size: int, frames: int, reps: int, threads: int) -> dict:
    runs: dict[str, list[float]] = {sink: [] for sink in SINKS}
    ratios: dict[str, list[float]] = {sink: [] for sink in SINKS[1:]}
    stages: dict[str, dict] = {}
    for rep in range(reps):
        order = SINKS[rep % len(SINKS):] + SINKS[:rep % len(SINKS)]
        this = {}
        for sink in order:
            measured = measure_once(size, sink, frames, threads)
            this[sink] = measured["fps"]
            stages[sink] = measured["stage_p50_ms"]
            runs[sink].append(this[sink])
        for sink in ratios:
            ratios[sink].append(this[sink] / this["none"])
        print(f"  {size}p rep {rep + 1}/{reps}: " + ", ".join(
            f"{sink} {this[sink]:.1f} fps" for sink in SINKS), flush=True)
    return {"size": size, "frames": frames, "reps": reps,
            "fps": {sink: statistics.median(v) for sink, v in runs.items()}, "fps_runs": runs,
            "ratio": {sink: statistics.median(v) for sink, v in ratios.items()},
            "ratio_runs": ratios, "stage_p50_ms": stages}


# ---- part 2 ------------------------------------------------------------------------------------


def ring_memory(content: str, seconds: float = 5.0, fps: float = 30.0,
                frames: int = 600) -> dict:
    """The ring's payload over ``frames`` 1080p frames (the clip looped) at ``fps``: ``noisy``,
    the drawn clip (independent noise of +-12 grey levels on every pixel of every frame, worse
    than a camera's), or ``calm``, the package's sample clip scaled up (flat shapes, no noise)."""
    path = clip_for(1080) if content == "noisy" else SAMPLE_CLIP
    capture = cv2.VideoCapture(str(path))
    images = []
    while len(images) < 300:
        ok, image = capture.read()
        if not ok:
            break
        images.append(cv2.resize(image, (1920, 1080), interpolation=cv2.INTER_LINEAR))
    capture.release()
    encoder = H264Encoder(1920, 1080, fps=fps)
    ring = PacketRing(seconds)
    sizes = []
    for index in range(frames):
        clock = index / fps
        for packet in encoder.encode(images[index % len(images)], clock):
            ring.add(packet, clock, index)
        if clock >= 10.0:
            sizes.append(ring.bytes)
    held = ring.since(-1.0)
    return {"content": content, "pre_s": seconds, "fps": fps, "frames_held": len(held),
            "seconds_held": round(held[-1].clock - held[0].clock, 3),
            "ring_mb_median": statistics.median(sizes) / 1e6, "ring_mb_max": max(sizes) / 1e6,
            "raw_bgr_mb": 1920 * 1080 * 3 * seconds * fps / 1e6}


def encoder_cpu(size: int, frames: int = 90) -> dict:
    """CPU and wall milliseconds per frame of ``H264Encoder`` on the ``size`` clip's frames."""
    capture = cv2.VideoCapture(str(clip_for(size)))
    images = [capture.read()[1] for _ in range(frames)]
    capture.release()
    height, width = SIZES[size]
    encoder = H264Encoder(width, height, fps=30.0)
    wall, cpu, payload = time.perf_counter(), time.process_time(), 0
    for index, image in enumerate(images):
        payload += sum(p.size for p in encoder.encode(image, index / 30.0))
    return {"size": size, "cpu_ms": (time.process_time() - cpu) / frames * 1e3,
            "wall_ms": (time.perf_counter() - wall) / frames * 1e3,
            "kb_per_frame": payload / frames / 1e3}


# ---- report ------------------------------------------------------------------------------------


def render(results: dict) -> str:
    lines = ["", f"{'size':<6} {'sink':<6} {'fps':>7} {'ratio':>6} {'cost':>7}"]
    for row in results.get("app", []):
        for sink in SINKS:
            fps = row["fps"][sink]
            if sink == "none":
                lines.append(f"{row['size']}p{'':<2} {sink:<6} {fps:>7.1f} {'1.00':>6} {'':>7}")
                continue
            ratio = row["ratio"][sink]
            lines.append(f"{row['size']}p{'':<2} {sink:<6} {fps:>7.1f} {ratio:>6.2f} "
                         f"{(1 - ratio) * 100:>6.1f}%")
    lines.append("(frames per second, median; ratio = paired median against no video sink)")
    for row in results.get("encoder", []):
        lines.append(f"H.264 encoder alone at {row['size']}p: {row['cpu_ms']:.1f} ms CPU, "
                     f"{row['wall_ms']:.1f} ms wall per frame, {row['kb_per_frame']:.0f} kB "
                     "per frame")
    for ring in results.get("ring", []):
        lines.append(f"clip ring, {ring['pre_s']:g} s of 1080p at {ring['fps']:g} fps, "
                     f"{ring['content']}: {ring['ring_mb_median']:.1f} MB median, "
                     f"{ring['ring_mb_max']:.1f} MB max ({ring['frames_held']} frames, "
                     f"{ring['seconds_held']:.2f} s held; raw BGR would be "
                     f"{ring['raw_bgr_mb']:.0f} MB)")
    for row in results.get("app", []):
        cost = 1 - row["ratio"]["h264"]
        lines.append(f"goal h264 writer cost at {row['size']}p: "
                     f"{'MET' if cost <= GOAL_COST else 'MISSED'} ({cost * 100:.1f} % <= "
                     f"{GOAL_COST * 100:.0f} %)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="720,1080")
    parser.add_argument("--frames", type=int, default=150, help="frames per measurement")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--no-ring", action="store_true", help="skip part 2")
    parser.add_argument("--no-app", action="store_true", help="skip part 1")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=str(RESULTS / "video_writer.json"))
    args = parser.parse_args()
    if args.worker:
        size, sink = args.worker.split(":")
        print(json.dumps(worker(int(size), sink, args.frames, args.threads)))
        return 0
    results: dict = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                 "threads": args.threads, "model": CASE.name}}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    for size in sizes:
        clip_for(size)
    if not args.no_app:
        print(f"[app] {CASE.name}, {args.frames} frames x {args.reps} reps", flush=True)
    if not args.no_app:
        results["app"] = [measure_size(size, args.frames, args.reps, args.threads)
                          for size in sizes]
    if not args.no_ring:
        print("[encoder, ring]", flush=True)
        results["encoder"] = [encoder_cpu(size) for size in sizes]
        results["ring"] = [ring_memory(content) for content in ("noisy", "calm")]
    text = render(results)
    print(text)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
