"""Train the camera apps' default models on generated shapes, and render their sample clip.

    python -m training.shapes --task detect  --seed 0 --scene-seed 0 --threads 2
    python -m training.shapes --task segment --seed 0 --scene-seed 0 --threads 2
    python -m training.shapes --task instance --seed 0 --scene-seed 0 --threads 1
    python -m training.shapes --task clip    --scene-seed 0

``detect`` and ``segment`` train, evaluate on held-out scenes, and write fp16 weights atomically to
``edgefuse/models/weights/shapes_yolov8.pt`` / ``shapes_deeplabv3plus.pt`` (``--out`` elsewhere);
``clip`` writes ``edgefuse/vision/scenes/data/shapes_clip.mp4``. Each task updates its entry of
``shapes.json`` next to the weights: seeds, the exact command, steps, batch, threads, held-out
metrics (measured on the fp16 weights as shipped), wall time, torch version, and the model's
application info. ``all`` runs detect then segment. ``instance`` trains the mask branch of
``shapes_yolov8_seg`` on the shipped (frozen) detector (``training.instance_masks``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from edgefuse._files import atomic_output, write_text
from edgefuse.models import shapes
from edgefuse.models._trained import WEIGHTS_DIR, load_trained
from edgefuse.models.deeplabv3plus import deeplabv3plus_shapes
from edgefuse.models.yolov8 import yolov8_shapes
from edgefuse.models.yolov8_seg import InstanceSegmenter, trained_yolov8_seg_shapes
from edgefuse.vision.media.video_file import write_video
from edgefuse.vision.scenes.shapes import CLASSES, SAMPLE_CLIP, SceneGenerator
from training.data import HELD_OUT_START, SCENE_SIZES
from training.fit import (
    Plan,
    evaluate_detector,
    evaluate_segmenter,
    train_detector,
    train_segmenter,
)
from training.instance_masks import MaskPlan, evaluate_masks, train_masks

ROOT = Path(__file__).resolve().parents[1]
CLIP_SIZE, CLIP_FPS, CLIP_FRAMES = (240, 320), 25.0, 150
CLIP_INDEX = 21  # chosen by eye among clips 0..59 of seed 0: eight objects, five classes, texture

DEFAULTS = {  # task: (steps, batch, lr, weight decay, held-out scenes)
    "detect": (2400, 16, 2e-3, 5e-4, 200),
    "segment": (1000, 16, 3e-3, 1e-4, 100),
    "instance": (300, 8, 3e-3, 0.0, 100),
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    if len(CLASSES) != shapes.NUM_CLASSES:
        raise SystemExit(f"edgefuse.models.shapes expects {shapes.NUM_CLASSES} classes, the "
                         f"generator has {len(CLASSES)}")
    command = "python -m training.shapes " + shlex.join(sys.argv[1:] if argv is None else argv)
    tasks = ("detect", "segment") if args.task == "all" else (args.task,)
    for task in tasks:
        if task == "clip":
            _clip(args, command)
        elif task == "instance":
            _instance(args, command)
        else:
            _model(task, args, command)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.shapes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=("detect", "segment", "instance", "all",
                                                               "clip"))
    parser.add_argument("--seed", type=int, default=0, help="training seed (initial weights)")
    parser.add_argument("--scene-seed", type=int, default=0, help="scene generator seed")
    parser.add_argument("--steps", type=int, help="optimiser steps (default per task)")
    parser.add_argument("--batch", type=int, help="scenes per step (default per task)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default per task)")
    parser.add_argument("--held-out", type=int, help="held-out scenes to evaluate on")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--workers", type=int, default=1, help="scene-generating processes")
    parser.add_argument("--out", type=Path, default=WEIGHTS_DIR,
                        help="folder for the weights and shapes.json")
    parser.add_argument("--clip-out", type=Path, default=SAMPLE_CLIP, help="the sample clip file")
    return parser


def _model(task: str, args: argparse.Namespace, command: str) -> None:
    steps, batch, lr, weight_decay, held_out = DEFAULTS[task]
    plan = Plan(
        steps=args.steps or steps, batch=args.batch or batch, lr=args.lr or lr,
        weight_decay=weight_decay, seed=args.seed, scene_seed=args.scene_seed,
        workers=args.workers,
    )
    held_out = args.held_out or held_out
    name = shapes.DETECTOR if task == "detect" else shapes.SEGMENTER
    train = train_detector if task == "detect" else train_segmenter
    print(f"{name}: {plan}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model, wall = train(plan, lambda line: print(line, flush=True))
    weights = args.out / f"{name}.pt"
    _save_fp16(model, weights)
    shipped = load_trained((yolov8_shapes if task == "detect" else deeplabv3plus_shapes)(), weights,
                           f"python -m training.shapes --task {task}")
    started = time.perf_counter()
    if task == "detect":
        metrics = evaluate_detector(shipped, args.scene_seed, held_out)
    else:
        metrics = evaluate_segmenter(shipped, args.scene_seed, held_out)
    print(f"{name}: {json.dumps(metrics)} (evaluated in {time.perf_counter() - started:.0f}s)")
    entry = {
        "file": weights.name,
        "bytes": weights.stat().st_size,
        "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "command": command,
        "training_seed": plan.seed,
        "scene_seed": plan.scene_seed,
        "steps": plan.steps,
        "batch": plan.batch,
        "lr": plan.lr,
        "weight_decay": plan.weight_decay,
        "threads": args.threads,
        "workers": plan.workers,
        "wall_time_s": round(wall, 1),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown cpu'}",
        "metrics": metrics,
        "app": shapes.app_info(name, CLASSES),
    }
    _update_record(args.out / shapes.RECORD_FILE.name,
                   lambda record: record.setdefault("models", {}).__setitem__(name, entry))


def _instance(args: argparse.Namespace, command: str) -> None:
    steps, batch, lr, _, held_out = DEFAULTS["instance"]
    plan = MaskPlan(steps=args.steps or steps, batch=args.batch or batch, lr=args.lr or lr,
                    seed=args.seed, scene_seed=args.scene_seed)
    held_out = args.held_out or held_out
    name = shapes.INSTANCE
    print(f"{name}: {plan}", flush=True)
    detector = load_trained(yolov8_shapes(), args.out / f"{shapes.DETECTOR}.pt",
                            "python -m training.shapes --task detect")
    model = InstanceSegmenter(detector)
    wall = train_masks(model, plan, lambda line: print(line, flush=True))
    weights = args.out / f"{name}.pt"
    _save_fp16(model.branch, weights)
    shipped = trained_yolov8_seg_shapes(args.out)
    started = time.perf_counter()
    metrics = evaluate_masks(shipped, args.scene_seed, held_out)
    print(f"{name}: {json.dumps(metrics)} (evaluated in {time.perf_counter() - started:.0f}s)")
    entry = {
        "file": weights.name,
        "bytes": weights.stat().st_size,
        "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "command": command,
        "detector": f"{shapes.DETECTOR}.pt (frozen)",
        "training_seed": plan.seed,
        "scene_seed": plan.scene_seed,
        "steps": plan.steps,
        "batch": plan.batch,
        "lr": plan.lr,
        "threads": args.threads,
        "wall_time_s": round(wall, 1),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown cpu'}",
        "metrics": metrics,
        "app": shapes.app_info(name, CLASSES),
    }
    _update_record(args.out / shapes.RECORD_FILE.name,
                   lambda record: record.setdefault("models", {}).__setitem__(name, entry))


def _save_fp16(model: torch.nn.Module, path: Path) -> None:
    state = {
        key: value.detach().half() if value.dtype.is_floating_point else value.detach()
        for key, value in model.state_dict().items()
    }
    with atomic_output(path, suffix=".pt") as tmp:
        torch.save(state, tmp)
    _readable(path)


def _clip(args: argparse.Namespace, command: str) -> None:
    generator = SceneGenerator(args.scene_seed, CLIP_SIZE)
    args.clip_out.parent.mkdir(parents=True, exist_ok=True)
    frames = (item.image for item in generator.clip(CLIP_INDEX, CLIP_FRAMES, CLIP_FPS))
    count = write_video(args.clip_out, frames, CLIP_FPS)
    _readable(args.clip_out)
    size = args.clip_out.stat().st_size
    print(f"wrote {args.clip_out}: {count} frames, {size} bytes")
    entry = {
        "file": _package_relative(args.clip_out),
        "bytes": size,
        "sha256": hashlib.sha256(args.clip_out.read_bytes()).hexdigest(),
        "scene_seed": args.scene_seed,
        "clip_index": CLIP_INDEX,
        "frames": count,
        "fps": CLIP_FPS,
        "size": list(CLIP_SIZE),
        "fourcc": "mp4v",
        "command": command,
    }
    _update_record(args.out / shapes.RECORD_FILE.name,
                   lambda record: record.__setitem__("clip", entry))


def _package_relative(path: Path) -> str:
    """``path`` relative to the edgefuse package (as installed), or as given outside it."""
    resolved = path.resolve()
    package = ROOT / "edgefuse"
    return str(resolved.relative_to(package)) if resolved.is_relative_to(package) else str(path)


def _update_record(path: Path, change) -> None:
    record: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    record["generator"] = {
        "module": "edgefuse.vision.scenes.shapes",
        "classes": list(CLASSES),
        "scene_sizes": [list(size) for size in SCENE_SIZES],
        "held_out_start": HELD_OUT_START,
    }
    change(record)
    write_text(path, json.dumps(record, indent=2) + "\n")
    _readable(path)


def _readable(path: Path) -> None:
    """Package data must be readable by everyone (atomic_output's temporary files are 0600)."""
    path.chmod(0o644)


if __name__ == "__main__":
    sys.exit(main())
