"""What a day of recording costs on the card: the numbers docs/service.md's retention section gives.

Measured, not estimated:

- the detection app itself (``edgefuse detect``, a fresh process) over the package's sample clip
  (320x240 at 25 fps, 150 frames: the demo's settings) with ``--save out.mp4 --jsonl out.jsonl``:
  H.264 bytes per minute of video (the file's size over the clip's duration) and JSON Lines bytes
  per frame (its size over the frames);
- H.264 as the apps write it (``VideoFile``: PyAV, libx264 ultrafast, zerolatency) over a 1280x720
  clip of moving shapes on a noisy gradient at 30 fps (bench.pipeline's; the noise makes the
  encoder work harder than a calm camera would): bytes per minute;
- an event snapshot as the event media write it (``write_snapshot``: the frame, one object boxed,
  JPEG quality 90) at both sizes: bytes per snapshot, the mean over ``--snapshots`` frames.

Each is then scaled to a day (video: 1440 minutes; JSON Lines: every frame of a day at the
clip's frame rate; snapshots: per 1000 events) and to the days 4 GiB holds (the default
``max_bytes`` of a service's ``retain``).

    python -m bench.disk_costs [--frames 150] [--snapshots 20] [--threads 1]

Prints a table and writes bench/results/disk_costs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

from bench.pipeline import sample_clip
from edgefuse.vision.media.snapshots import write_snapshot
from edgefuse.vision.media.video_file import VideoFile
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DAY_S = 86400
BUDGET = 4 << 30  # the service's default retain.max_bytes (4G)


def frames_of(path: Path, limit: int) -> tuple[list[np.ndarray], float]:
    capture = cv2.VideoCapture(str(path))
    fps = capture.get(cv2.CAP_PROP_FPS) or 30.0
    frames = []
    while len(frames) < limit:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames, fps


def app_run(frames: int, threads: int, scratch: Path) -> dict:
    """The detection app over the sample clip: its video and JSON Lines sizes."""
    video, lines = scratch / "out.mp4", scratch / "out.jsonl"
    subprocess.run([sys.executable, "-m", "edgefuse", "detect", "--model", "shapes_yolov8",
                    "--source", str(SAMPLE_CLIP), "--save", str(video), "--jsonl", str(lines),
                    "--max-frames", str(frames), "--backend", "cpu", "--threads", str(threads),
                    "--stats-every", "0"], check=True, cwd=ROOT, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, fps = frames_of(SAMPLE_CLIP, 1)
    read = len(lines.read_text().splitlines())
    return {"size": "320x240", "fps": fps, "frames": read,
            "video_bytes_per_min": video.stat().st_size / (read / fps) * 60,
            "jsonl_bytes_per_frame": lines.stat().st_size / read}


def encoded(frames: list[np.ndarray], fps: float, scratch: Path) -> float:
    """H.264 bytes per minute of ``frames`` at ``fps``, written as the apps write video."""
    path = scratch / "encoded.mp4"
    video = VideoFile(path, fps=fps)
    for frame in frames:
        video.write(frame)
    video.close()
    return path.stat().st_size / (len(frames) / fps) * 60


def snapshot_bytes(frames: list[np.ndarray], scratch: Path) -> float:
    folder = scratch / "snapshots"
    folder.mkdir()
    sizes = []
    for index, frame in enumerate(frames):
        height, width = frame.shape[:2]
        event = {"type": "line_crossed", "time": 1_800_000_000.0 + index, "line": "door",
                 "track_id": index, "class": "square", "direction": "in"}
        box = (width * 0.3, height * 0.3, width * 0.6, height * 0.7)
        sizes.append(write_snapshot(folder, event, frame, box).stat().st_size)
    return float(np.mean(sizes))


def measure(frames: int, snapshots: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="edgefuse-bench-") as scratch:
        scratch_dir = Path(scratch)
        demo = app_run(frames, threads, scratch_dir)
        demo_frames, _ = frames_of(SAMPLE_CLIP, snapshots)
        demo["snapshot_bytes"] = snapshot_bytes(demo_frames, scratch_dir)
        hd_frames, hd_fps = frames_of(sample_clip(RESULTS / "video_clip_720p.mp4", frames=300,
                                                  size=(720, 1280)), frames)
        (scratch_dir / "snapshots").rename(scratch_dir / "demo-snapshots")
        hd = {"size": "1280x720", "fps": hd_fps, "frames": len(hd_frames),
              "video_bytes_per_min": encoded(hd_frames, hd_fps, scratch_dir),
              "jsonl_bytes_per_frame": demo["jsonl_bytes_per_frame"],  # the scene's, not size's
              "snapshot_bytes": snapshot_bytes(hd_frames[:snapshots], scratch_dir)}
    for row in (demo, hd):
        row["video_bytes_per_day"] = row["video_bytes_per_min"] * 1440
        row["jsonl_bytes_per_day"] = row["jsonl_bytes_per_frame"] * row["fps"] * DAY_S
        row["snapshot_bytes_per_1000_events"] = row["snapshot_bytes"] * 1000
        row["video_days_in_4GiB"] = BUDGET / row["video_bytes_per_day"]
        row["jsonl_days_in_4GiB"] = BUDGET / row["jsonl_bytes_per_day"]
    return {"demo": demo, "hd_noisy": hd, "budget_bytes": BUDGET}


def render(results: dict) -> str:
    def mb(value: float) -> str:
        return f"{value / 1e6:,.1f} MB"

    lines = ["scene              video/min   video/day   days in 4 GiB   JSONL/frame   "
             "JSONL/day   days in 4 GiB   snapshot   per 1000 events"]
    for name, label in (("demo", "sample 320x240@25"), ("hd_noisy", "noisy 1280x720@30")):
        row = results[name]
        lines.append(f"{label:<18} {mb(row['video_bytes_per_min']):>9}  "
                     f"{mb(row['video_bytes_per_day']):>11}  {row['video_days_in_4GiB']:>12.1f}  "
                     f"{row['jsonl_bytes_per_frame']:>9.0f} B  {mb(row['jsonl_bytes_per_day']):>11}"
                     f"  {row['jsonl_days_in_4GiB']:>12.1f}  {row['snapshot_bytes'] / 1e3:>6.1f} kB"
                     f"  {mb(row['snapshot_bytes_per_1000_events']):>10}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--snapshots", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    results = measure(args.frames, args.snapshots, args.threads)
    print(render(results))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "disk_costs.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS / 'disk_costs.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
