"""Train the catalogue's text detector (``dbnet_text``) on generated text images.

    python -m training.text_detector          # the shipped weights: about 15 minutes on one core
    python -m training.text_detector --steps 100 --out /tmp/t.pt --record /tmp/t.json   # a try

Why this recipe: DB's loss on the probability map (Liao et al. 2020; PaddleOCR's ``DBLoss``
without its threshold-map terms, because the shipped model has no threshold branch): binary
cross-entropy balanced by hard-negative mining (every positive pixel and the three times as many
hardest negatives, PaddleOCR's ``BalanceLoss``) plus dice loss. Images come from
``edgefuse.vision.scenes.text`` drawn at the model's input size and go through the same
preprocessing record the exported model carries (RGB, /255, ImageNet mean and std), so the
detector sees in training what it sees in an app. A pool of training scenes (seed ``--seed``) is
drawn once; the figures come from held-out scenes of another seed: pixel precision/recall/F1/IoU
of the map thresholded at 0.3 against the shrunk word regions, and word recall/precision of
PaddleOCR's box decoding matched to the true word boxes at IoU >= 0.5.

One torch thread, AdamW with warm-up and cosine decay; the run is a function of its arguments.
The weights are stored as FP16 (halving the package data) and the held-out figures are measured
with those FP16-rounded weights, i.e. of the model the catalogue loads. Writes the weights and a
JSON record (command, settings, time, figures, loss curve) next to them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from edgefuse._files import atomic_output, write_text
from edgefuse.metrics.text import pixel_scores, word_scores
from edgefuse.models.dbnet import INPUT_SIZE, PREPROCESS, dbnet_text
from edgefuse.vision.detect.text_boxes import THRESHOLD, text_boxes
from edgefuse.vision.scenes.text import TextScene, text_scene

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "edgefuse" / "models" / "weights" / "dbnet_text.pt"
HELD_OUT_SEED = 1000  # far from any training seed
NEGATIVE_RATIO = 3.0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    record_path = args.record or str(Path(args.out).with_suffix(".json"))
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    images, targets = _pool(args.seed, args.pool)
    pool_seconds = time.perf_counter() - start
    print(f"drew {args.pool} training scenes in {pool_seconds:.0f} s", flush=True)
    model = dbnet_text("full")
    curve = _train(model, images, targets, args)
    train_seconds = time.perf_counter() - start - pool_seconds
    model.eval()
    state = {key: value.half() if value.is_floating_point() else value
             for key, value in model.state_dict().items()}
    model.load_state_dict(state)  # widened back: the figures are the shipped weights'
    held_out = [text_scene(HELD_OUT_SEED, index, size=INPUT_SIZE)
                for index in range(args.held_out)]
    figures = score_maps(predict(model, held_out), held_out)
    _save(state, args.out)
    record = {
        "model": "dbnet_text",
        "command": " ".join(["python -m training.text_detector", shlex.join(argv)]).strip(),
        "seed": args.seed,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "pool": args.pool,
        "input_size": list(INPUT_SIZE),
        "preprocess": PREPROCESS.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "seconds": {"scenes": round(pool_seconds, 1), "training": round(train_seconds, 1),
                    "total": round(time.perf_counter() - start, 1),
                    "cpu": round(time.process_time(), 1)},
        "held_out": {"seed": HELD_OUT_SEED, "images": args.held_out, **figures},
        "weights": {"file": Path(args.out).name, "dtype": "float16",
                    "bytes": Path(args.out).stat().st_size,
                    "sha256": hashlib.sha256(Path(args.out).read_bytes()).hexdigest()},
        "loss_curve": curve,
    }
    write_text(record_path, json.dumps(record, indent=2) + "\n")
    print(json.dumps({"seconds": record["seconds"], "held_out": record["held_out"]}, indent=2))
    return 0


def predict(model: torch.nn.Module, scenes: Sequence[TextScene], batch: int = 32) -> np.ndarray:
    """The model's probability maps [N, 1, H, W] for ``scenes`` (through ``PREPROCESS``)."""
    maps = []
    with torch.no_grad():
        for first in range(0, len(scenes), batch):
            inputs = np.concatenate([PREPROCESS(s.image)[0] for s in scenes[first:first + batch]])
            maps.append(model(torch.from_numpy(inputs)).numpy())
    return np.concatenate(maps)


def score_maps(maps: np.ndarray, scenes: Sequence[TextScene]) -> dict[str, dict]:
    """Pixel scores of ``maps > 0.3`` against the targets, and word scores of the decoded boxes
    against the true word boxes (IoU >= 0.5)."""
    pixels = pixel_scores(maps[:, 0] > THRESHOLD, np.stack([s.target > 0.5 for s in scenes]))
    found = [[box.quad for box in text_boxes(m[0])] for m in maps]
    words = word_scores(found, [list(s.quads) for s in scenes])
    return {"pixel": _rounded(pixels), "words": _rounded(words)}


def db_loss(probability: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Balanced BCE (all positives, the 3x hardest negatives) plus dice, on the whole batch."""
    positive, negative = target, 1.0 - target
    positives = int(positive.sum())
    negatives = min(int(negative.sum()), int(positives * NEGATIVE_RATIO))
    bce = F.binary_cross_entropy(probability, target, reduction="none")
    hardest = (bce * negative).flatten().topk(negatives).values if negatives else bce[:0]
    balanced = ((bce * positive).sum() + hardest.sum()) / (positives + negatives + 1e-6)
    intersection = (probability * target).sum()
    dice = 1.0 - 2.0 * intersection / (probability.sum() + target.sum() + 1e-6)
    return balanced + dice


def _train(model, images, targets, args) -> list[list[float]]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    warmup = min(100, args.steps // 10)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    rng = np.random.default_rng(args.seed)
    model.train()
    curve, running, began = [], [], time.perf_counter()
    for step in range(args.steps):
        chosen = rng.integers(0, len(images), args.batch)
        inputs = torch.from_numpy(np.concatenate([PREPROCESS(images[i])[0] for i in chosen]))
        target = torch.from_numpy(targets[chosen]).float()[:, None]
        loss = db_loss(model(inputs), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        running.append(loss.item())
        if (step + 1) % 50 == 0 or step + 1 == args.steps:
            mean = float(np.mean(running))
            curve.append([step + 1, round(mean, 4)])
            print(f"step {step + 1}/{args.steps}  loss {mean:.4f}  "
                  f"{time.perf_counter() - began:.0f} s", flush=True)
            running = []
    return curve


def _pool(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    scenes = [text_scene(seed, index, size=INPUT_SIZE) for index in range(count)]
    return (np.stack([s.image for s in scenes]),
            np.stack([(s.target > 0.5).astype(np.uint8) for s in scenes]))


def _save(state: dict, path: str) -> None:
    with atomic_output(path, suffix=".pt") as tmp:
        torch.save(state, tmp)


def _rounded(values: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.text_detector",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0, help="seed of the training scenes and run")
    parser.add_argument("--pool", type=int, default=5000, help="training scenes drawn once")
    parser.add_argument("--held-out", type=int, default=300, help="held-out scenes scored")
    parser.add_argument("--out", default=str(WEIGHTS), help="where the weights go")
    parser.add_argument("--record", default=None,
                        help="the JSON record (default: the weights' path with .json)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
