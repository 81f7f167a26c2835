"""Benchmark `edgefuse quantize --int8` (issue 32): what INT8 costs in accuracy on the host
emulation, how many layers the automatic choice keeps FP16, and the board floor FP16 vs INT8.

Models: the demo detector and segmenter (trained weights, the sample clip with its exact ground
truth) and ResNet-50 (the catalogue's builder: seeded weights, no trained ones exist in the
repository or may be downloaded, so its top-1 is agreement with its own FP32 decisions on the
test photos, tests/vision/photos, through ImageNet mean/std with a stretch to 224x224).

For each model, in fresh processes and timed: ``edgefuse quantize MODEL --int8 --inputs FRAMES
--keep-fp16 none --emulate`` (every layer INT8) and ``--keep-fp16 auto --task T`` (the automatic
choice). Then:
- the gate's metric (``int8_report.json``: top-1 / AP50 / mIoU against the FP32 model's decisions
  on the calibration frames) for FP16 (storage emulated), all-INT8 and the automatic mix;
- for the demo models, the metric against the clip's ground truth over all 150 frames (the apps'
  own decode: ``edgefuse.demo``'s run_on_clip and clip_truth) for FP32, FP16, all-INT8 and the mix;
- the board floor (``edgefuse profile --soc Ascend310B4 --precision fp16|int8 [--keep-fp16]``):
  the roofline from the SoC's published peaks, a lower bound, not a prediction.

    python -m bench.quantize --int8
    python -m bench.quantize --int8 --models shapes_yolov8

Prints a table and writes bench/results/quantize_int8.json. The INT8 figures are host predictions
until a board confirms them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from bench._harness import MODELS_DIR, RESULTS, ROOT
from edgefuse import model_info
from edgefuse._files import save_onnx
from edgefuse.apps.models import catalogue_info
from edgefuse.convert import convert
from edgefuse.demo.clip_runs import run_on_clip
from edgefuse.demo.clip_truth import clip_scenes, detection_ap50, segmentation_miou
from edgefuse.models.catalogue import get_entry
from edgefuse.models.shapes import DETECTOR, SEGMENTER
from edgefuse.optimize import optimize
from edgefuse.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from edgefuse.profile.run import profile
from edgefuse.reference.feeds import calibration_preprocess, feed_set, input_specs
from edgefuse.reference.fp16 import fp16_storage_model
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.verify import verify
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.segment.segmenter import Segmenter

MODELS = (DETECTOR, SEGMENTER, "resnet50")
# A second automatic choice under a tighter gate, to show what the search keeps and what each kept
# layer buys where the default gate keeps nothing.
STRICT_DROP = 0.1
SOC = "Ascend310B4"
PHOTOS = ROOT / "tests" / "vision" / "photos"
CLIP_KINDS = {DETECTOR: (Detector, "AP50"), SEGMENTER: (Segmenter, "mIoU")}
HOW_TO_CONFIRM = (
    "INT8 figures are host predictions (ONNX Runtime QDQ with CANN's scheme: IFMR activations, "
    "ARQ per-channel weights) until a board confirms them. On the board: edgefuse compile "
    "MODEL --soc Ascend310B4 -o build_int8 --int8 FOLDER, then edgefuse run build_int8 "
    "--backend acl --frames FRAMES/ --record board_int8.npz; on the host: edgefuse verify "
    "--against board_int8.npz FOLDER/host_int8.qdq.onnx (the emulation against the board).")


def prepare(name: str) -> tuple[Path, str, Path, Path | None]:
    """The FP32 model as the demo makes it (converted, app info embedded, optimized): its path,
    task, calibration inputs and preprocessing record (None: the app info's)."""
    entry = get_entry(name)
    path = MODELS_DIR / f"{name}.int8bench.fp32.onnx"
    converted = convert(entry.build(), inputs={"input": entry.input_shape})
    if entry.app is not None:
        converted = model_info.embed(converted, catalogue_info(entry, "full"))
    save_onnx(optimize(converted).model, path)
    if entry.app is not None:
        return path, entry.task, SAMPLE_CLIP, None
    record = MODELS_DIR / f"{name}.imagenet.json"
    record.write_text(json.dumps(Preprocess(size=entry.input_shape[2:], resize="stretch",
                                            mean=IMAGENET_MEAN, std=IMAGENET_STD).to_dict()))
    return path, entry.task, PHOTOS, record


def quantize_in_fresh_process(model: Path, out: Path, inputs: Path, preprocess: Path | None,
                              task: str, keep: str, max_drop: float = 1.0) -> float:
    command = [sys.executable, "-m", "edgefuse", "quantize", str(model), "--int8", "--inputs",
               str(inputs), "-o", str(out), "--task", task, "--keep-fp16", keep, "--emulate",
               "--max-drop", str(max_drop)]
    if preprocess is not None:
        command += ["--preprocess", str(preprocess)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr.strip()[-2000:])
    return seconds


def clip_scores(name: str, variants: dict[str, Path]) -> dict[str, dict[str, float]]:
    """The metric of each variant's app results against the clip's ground truth; for the
    segmenter also the mean IoU over the classes the truth holds (the demo's mIoU averages over
    classes present in either map, so one stray pixel of a class the clip never shows adds an
    IoU of 0 for that class)."""
    kind, _ = CLIP_KINDS[name]
    truth = clip_scenes()
    scores: dict[str, dict[str, float]] = {}
    for label, path in variants.items():
        results = run_on_clip(kind, path, SAMPLE_CLIP, ("cpu",)).results
        if kind is Detector:
            scores[label] = {"AP50": detection_ap50(results, truth)}
            continue
        classes = results[0].num_classes
        labels = np.stack([scene.mask for scene in truth])
        maps = np.stack([result.class_map for result in results])
        in_truth = [k for k in range(classes) if (labels == k).any()]
        ious = [((maps == k) & (labels == k)).sum() / ((maps == k) | (labels == k)).sum()
                for k in in_truth]
        scores[label] = {"mIoU": segmentation_miou(results, truth, classes),
                         "mIoU_truth_classes": float(np.mean(ious)),
                         "stray_pixels_of_absent_classes": int(sum(
                             (maps == k).sum() for k in range(classes) if k not in in_truth))}
    return scores


def agreement(model: Path, candidates: dict[str, Path], inputs: Path,
              preprocess: Path | None) -> dict[str, float | int]:
    """Worst output cosine of each candidate against FP32 on the calibration frames, and how
    many distinct FP32 top-1 classes those frames give (a classifier's top-1 agreement means
    little when every frame gets the same class)."""
    found: dict[str, float | int] = {
        label: round(min(o.cosine for o in verify(model, path, inputs=inputs,
                                                   preprocess=preprocess).outputs), 6)
        for label, path in candidates.items()}
    fp32 = onnx.load(model)
    samples = feed_set(input_specs(fp32), inputs,
                       preprocess=calibration_preprocess(fp32, preprocess))
    first = [next(iter(run_onnx(fp32, s).values())) for s in samples]
    if first[0].ndim == 2:
        found["fp32_distinct_top1"] = len({int(np.argmax(o[0])) for o in first})
    return found


def floors(model: Path, keep: list[str]) -> dict[str, float]:
    def floor(**kwargs) -> float:
        return round(profile(model, "cpu", runs=1, warmup=0, soc=SOC, **kwargs).floor_us, 1)
    return {"fp16": floor(precision="fp16"), "int8_all": floor(precision="int8"),
            "int8_auto": floor(precision="int8", keep_fp16=keep)}


def bench_model(name: str) -> dict:
    model, task, inputs, preprocess = prepare(name)
    all_dir, auto_dir, strict_dir = (MODELS_DIR / f"{name}.int8.{kind}"
                                     for kind in ("all", "auto", "strict"))
    for folder in (all_dir, auto_dir, strict_dir):  # quantize --int8 refuses to write over one
        shutil.rmtree(folder, ignore_errors=True)
    seconds_all = quantize_in_fresh_process(model, all_dir, inputs, preprocess, task, "none")
    seconds_auto = quantize_in_fresh_process(model, auto_dir, inputs, preprocess, task, "auto")
    seconds_strict = quantize_in_fresh_process(model, strict_dir, inputs, preprocess, task, "auto",
                                               STRICT_DROP)
    report = json.loads((auto_dir / "int8_report.json").read_text())
    strict = json.loads((strict_dir / "int8_report.json").read_text())
    layers = sum(n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")
                 for n in onnx.load(model).graph.node)
    row = {
        "task": task, "metric": report["metric"], "samples": report["samples"],
        "calibration": str(inputs.relative_to(ROOT)) if inputs.is_relative_to(ROOT)
        else str(inputs),
        "parity": {"fp32": 1.0, "fp16": report["fp16"], "int8_all": report["int8_all_layers"],
                   "int8_auto": report["int8_mixed"]},
        "gate_passed": report["passed"], "max_drop_points": report["max_drop_points"],
        "quantizable_layers": layers, "kept_fp16": report["keep_fp16"],
        "kept_detail": report["kept"], "evaluations": report["evaluations"],
        "quantize_seconds": {"all_int8": round(seconds_all, 1),
                             "auto": round(seconds_auto, 1), "strict": round(seconds_strict, 1)},
        "floor_us": floors(model, report["keep_fp16"]),
        "strict_gate": {"max_drop_points": STRICT_DROP, "int8_mixed": strict["int8_mixed"],
                        "passed": strict["passed"], "kept_fp16": strict["keep_fp16"],
                        "kept_detail": strict["kept"], "evaluations": strict["evaluations"],
                        "seconds": strict["seconds"],
                        "floor_us": floors(model, strict["keep_fp16"])["int8_auto"]},
        "worst_output_cosine": agreement(model, {
            "int8_all": all_dir / "host_int8.qdq.onnx",
            "int8_strict": strict_dir / "host_int8.qdq.onnx"}, inputs, preprocess),
    }
    if name in CLIP_KINDS:
        fp16 = MODELS_DIR / f"{name}.int8bench.fp16-storage.onnx"
        save_onnx(fp16_storage_model(onnx.load(model), force_fp16=True), fp16)
        row["clip_metric"] = CLIP_KINDS[name][1]
        row["clip_truth"] = clip_scores(name, {
            "fp32": model, "fp16": fp16, "int8_all": all_dir / "host_int8.qdq.onnx",
            "int8_auto": auto_dir / "host_int8.qdq.onnx",
            "int8_strict": strict_dir / "host_int8.qdq.onnx"})
    return row


def render(results: dict) -> str:
    lines = [f"{'model':<22}{'metric':<9}{'FP16':>7}{'INT8':>7}{'auto':>7}{'kept':>7}"
             f"{'strict':>8}{'kept':>7}{'cos INT8':>10}{'floor us FP16/INT8/strict':>27}"
             f"{'q s':>6}"]
    for name, row in results["models"].items():
        if "error" in row:
            lines.append(f"{name:<22}FAILED: {row['error'][:140]}")
            continue
        parity, floor, strict = row["parity"], row["floor_us"], row["strict_gate"]
        lines.append(
            f"{name:<22}{row['metric']:<9}{parity['fp16']:>7.4f}{parity['int8_all']:>7.4f}"
            f"{parity['int8_auto']:>7.4f}{len(row['kept_fp16']):>4}/{row['quantizable_layers']:<2}"
            f"{strict['int8_mixed']:>8.4f}{len(strict['kept_fp16']):>4}/"
            f"{row['quantizable_layers']:<2}{row['worst_output_cosine']['int8_all']:>10.5f}"
            f"{floor['fp16']:>11.0f}/{floor['int8_all']:.0f}/{strict['floor_us']:.0f}"
            f"{row['quantize_seconds']['auto']:>9.1f}")
    truths = [(name, row) for name, row in results["models"].items() if "clip_truth" in row]
    if truths:
        lines.append("")
        lines.append(f"{'on the clip truth':<42}{'FP32':>8}{'FP16':>8}{'INT8':>8}{'auto':>8}"
                     f"{'strict':>8}")
    for name, row in truths:
        for key in row["clip_truth"]["fp32"]:
            if key.startswith("stray"):
                continue
            values = "".join(f"{row['clip_truth'][v][key]:>8.4f}" for v in
                             ("fp32", "fp16", "int8_all", "int8_auto", "int8_strict"))
            lines.append(f"{name + ' ' + key:<42}{values}")
    for name, row in results["models"].items():
        distinct = row.get("worst_output_cosine", {}).get("fp32_distinct_top1")
        if distinct is not None:
            lines.append(f"{name}: the FP32 model gives {distinct} distinct top-1 class(es) on "
                         f"the {row['samples']} calibration photos (seeded weights: top-1 "
                         "agreement says little; the output cosine says more)")
    lines += [
        "",
        "FP16/INT8/auto: the gate's metric against the FP32 model's decisions on the calibration "
        "frames (auto: layers kept FP16 by quantize --int8's automatic choice, gate FP16 - 1 "
        f"point; strict: gate FP16 - {STRICT_DROP} point); cos INT8: worst output cosine, all "
        f"layers INT8, against FP32; floor: the roofline on {SOC} (a lower bound); q s: quantize "
        "--int8 --keep-fp16 auto, a fresh process. Clip truth: all 150 frames through the apps.",
        HOW_TO_CONFIRM]
    return "\n".join(lines)


def main(models: list[str], json_path: Path) -> None:
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    results: dict = {"soc": SOC, "note": HOW_TO_CONFIRM, "models": {}}
    for name in models:
        print(f"[{name}] prepare, quantize --int8 (all, auto), score, floor", flush=True)
        try:
            results["models"][name] = bench_model(name)
        except Exception as exc:  # noqa: BLE001 - record the failure, benchmark the rest
            results["models"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        json_path.write_text(json.dumps(results, indent=2))
    print(render(results))
    print(f"\nwrote {json_path}")


DEFAULT_JSON = RESULTS / "quantize_int8.json"
