"""Benchmark the host decode of every detector layout at its family's usual size, 80 classes.

``edgefuse.vision.detect.decode.decode`` (candidates, the layout's NMS, mapping back to a 1280 x
720 frame) on outputs shaped as each family exports them at 640 x 640 (PicoDet: 416 x 416), with
realistic scores: background sigmoid(N(-6, 1.5)), 20 objects each lighting 30 anchors (20 queries
for the NMS-free layouts) with scores in 0.5-0.95. The outputs are synthetic (random, seeded);
the decode does not look at where they came from. Reports the median of ``--reps`` runs per
layout and the detections it kept.

    python -m bench.detect_layouts [--reps 200]

Prints a table and writes bench/results/detect_layouts.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from bench._harness import RESULTS
from edgefuse.preprocess import letterbox
from edgefuse.vision.detect.decode import DetectOptions, decode
from edgefuse.vision.detect.heads import pico_centres, yolox_grid_count
from edgefuse.vision.detect.recognise import Evidence, bind

CLASSES = 80
OBJECTS, ANCHORS_PER_OBJECT = 20, 30


def _background(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (1 / (1 + np.exp(-rng.normal(-6, 1.5, shape)))).astype(np.float32)


def _lit(rng: np.random.Generator, rows: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows lit by objects, their class); each object lights ``count`` neighbouring rows."""
    starts = rng.integers(0, rows - count, OBJECTS)
    lit = (starts[:, None] + np.arange(count)).reshape(-1)
    return lit, np.repeat(rng.integers(0, CLASSES, OBJECTS), count)


def _boxes(rng: np.random.Generator, count: int, size: int) -> np.ndarray:
    """cx, cy, w, h in pixels of a ``size`` input."""
    centre = rng.uniform(40, size - 40, (count, 2))
    return np.concatenate([centre, rng.uniform(20, 120, (count, 2))], 1).astype(np.float32)


def outputs_for(layout: str, rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    if layout == "yolov8":
        out = np.zeros((1, 4 + CLASSES, 8400), np.float32)
        out[0, :4] = _boxes(rng, 8400, 640).T
        out[0, 4:] = _background(rng, (CLASSES, 8400))
        lit, cls = _lit(rng, 8400, ANCHORS_PER_OBJECT)
        out[0, 4 + cls, lit] = rng.uniform(0.5, 0.95, len(lit))
        return {"output0": out}
    if layout in ("yolov5", "yolox"):
        rows = 25200 if layout == "yolov5" else yolox_grid_count((640, 640), (8, 16, 32))
        out = np.zeros((1, rows, 5 + CLASSES), np.float32)
        if layout == "yolov5":
            out[0, :, :4] = _boxes(rng, rows, 640)
        else:
            out[0, :, :2] = rng.uniform(0, 1, (rows, 2))
            out[0, :, 2:4] = rng.uniform(0.5, 2.5, (rows, 2))
        out[0, :, 4:] = _background(rng, (rows, 1 + CLASSES))
        lit, cls = _lit(rng, rows, ANCHORS_PER_OBJECT)
        out[0, lit, 4] = rng.uniform(0.7, 0.99, len(lit))
        out[0, lit, 5 + cls] = rng.uniform(0.7, 0.99, len(lit))
        return {"output": out}
    if layout == "end2end":
        k6 = np.zeros((1, 300, 6), np.float32)
        k6[0, :, :2], k6[0, :, 2:4] = rng.uniform(0, 500, (300, 2)), rng.uniform(0, 140, (300, 2))
        k6[0, :, 2:4] += k6[0, :, :2]
        k6[0, :, 4] = np.sort(np.concatenate([rng.uniform(0.5, 0.95, OBJECTS),
                                              _background(rng, (300 - OBJECTS,))]))[::-1]
        k6[0, :, 5] = rng.integers(0, CLASSES, 300)
        logits = rng.normal(-6, 1.5, (1, 300, CLASSES)).astype(np.float32)
        logits[0, np.arange(OBJECTS), rng.integers(0, CLASSES, OBJECTS)] = 2.0
        boxes = rng.uniform(0.1, 0.9, (1, 300, 4)).astype(np.float32) * [1, 1, 0.2, 0.2]
        return {"end2end [1,300,6]": {"output0": k6},
                "end2end DETR": {"pred_logits": logits, "pred_boxes": boxes.astype(np.float32)}}
    if layout == "ppyoloe":
        boxes = _boxes(rng, 8400, 640)
        xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2],
                              1)[None]
        scores = _background(rng, (1, CLASSES, 8400))
        lit, cls = _lit(rng, 8400, ANCHORS_PER_OBJECT)
        scores[0, cls, lit] = rng.uniform(0.5, 0.95, len(lit))
        pico = {}
        for stride in (8, 16, 32, 64):
            rows = len(pico_centres((416, 416), stride))
            score = _background(rng, (1, rows, CLASSES))
            lit, cls = _lit(rng, rows, min(ANCHORS_PER_OBJECT, rows // 2))
            score[0, lit, cls] = rng.uniform(0.5, 0.95, len(lit))
            pico[f"score_{stride}"] = score
        for stride in (8, 16, 32, 64):
            rows = len(pico_centres((416, 416), stride))
            pico[f"dist_{stride}"] = rng.normal(0, 1, (1, rows, 32)).astype(np.float32)
        return {"ppyoloe boxes+scores": {"boxes": xyxy.astype(np.float32), "scores": scores},
                "ppyoloe PicoDet heads": pico}
    raise ValueError(layout)


def run(reps: int) -> dict:
    rng = np.random.default_rng(0)
    frame = np.zeros((720, 1280, 3), np.uint8)
    rows = []
    for layout in ("yolov8", "yolov5", "yolox", "end2end", "ppyoloe"):
        cases = outputs_for(layout, rng)
        if not isinstance(next(iter(cases.values())), dict):
            cases = {layout: cases}
        for name, outputs in cases.items():
            size = (416, 416) if "PicoDet" in name else (640, 640)
            _, geometry = letterbox(frame, size)
            specs = [(n, a.shape, a.dtype.name) for n, a in outputs.items()]
            heads = bind(layout, specs, Evidence(size, CLASSES))
            times, kept = [], 0
            for _ in range(reps):
                start = time.perf_counter()
                kept = len(decode(outputs, layout, geometry, DetectOptions(), heads))
                times.append(time.perf_counter() - start)
            shapes = " + ".join(f"[{','.join(map(str, a.shape))}]" for a in outputs.values())
            rows.append({"case": name, "outputs": shapes if len(shapes) < 60 else
                         f"{len(outputs)} outputs", "median_ms": statistics.median(times) * 1e3,
                         "kept": kept})
            print(f"  {name}: {rows[-1]['median_ms']:.2f} ms, {kept} kept")
    return {"machine": platform.processor() or platform.machine(), "reps": reps, "cases": rows}


def render(results: dict) -> str:
    lines = ["| layout | outputs | decode median (ms) | kept |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {r['case']} | {r['outputs']} | {r['median_ms']:.2f} | {r['kept']} |"
              for r in results["cases"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    results = run(args.reps)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "detect_layouts.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(out)
    print(render(results))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
