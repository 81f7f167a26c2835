"""Benchmark `edgefuse quantize --fp16 --keep-fp32 auto` on the catalogue models.

For each catalogue model this script exports the FP32 ONNX (edgefuse convert), runs
``edgefuse quantize IN -o OUT --fp16 --keep-fp32 auto --report R.json`` in a fresh process and
times it (wall clock, process start included), then scores the FP16 model against the FP32 one on
seeded random inputs with FP16 storage emulated on the host: output cosine, and the task metric
(top-1/top-5 agreement; AP50 and AP50:95 of the FP16 boxes against the FP32 boxes; mean IoU of the
argmax maps). For contrast it also scores the FP32 model under ATC's default ``force_fp16`` with
nothing kept (every tensor rounded to FP16).

    python -m bench.quantize                          # every model, full size
    python -m bench.quantize --variant tiny --models yolov5s,resnet50 --samples 2
    python -m bench.quantize --int8        # INT8 instead: bench/quantize_int8.py

Prints a table and writes bench/results/quantize.json. The catalogue models carry seeded random
weights: their detections score low (YOLOv3 peaks near 0.15), so AP is reported with the FP32
boxes above ``--gt-conf`` (default 0.1) as ground truth, and at 0.25 where that leaves any.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import quantize_int8
from bench._harness import MODELS_DIR, RESULTS, ROOT, export_catalogue_model
from edgefuse.models import CATALOGUE, get_entry
from edgefuse.verify import verify


def quantize_in_fresh_process(source: Path, target: Path, report: Path) -> tuple[float, int]:
    command = [sys.executable, "-m", "edgefuse", "quantize", str(source), "-o", str(target),
               "--fp16", "--keep-fp32", "auto", "--report", str(report)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr.strip()[-2000:])
    return seconds, done.returncode


def score(name: str, source: Path, target: Path, samples: int, gt_conf: float) -> dict:
    task = get_entry(name).task
    fp16 = verify(source, target, samples=samples, task=task, gt_conf=gt_conf, min_cosine=0.999)
    forced = verify(source, source, samples=samples, task=task, gt_conf=gt_conf,
                    emulate_fp16=True, min_cosine=0.999)
    row = {
        "task": task,
        "cosine": min(o.cosine for o in fp16.outputs),
        "max_rel_l2": max(o.rel_l2_error for o in fp16.outputs),
        "task_metrics": fp16.task.metrics,
        "task_passed": fp16.task.passed,
        "force_fp16_cosine": min(o.cosine for o in forced.outputs),
        "force_fp16_task_metrics": forced.task.metrics,
    }
    if task == "detect":
        strict = verify(source, target, samples=samples, task=task, gt_conf=0.25)
        row["task_metrics_gt_conf_0.25"] = strict.task.metrics
    return row


def render(results: dict) -> str:
    lines = [
        f"{'model':<28}{'variant':<8}{'quantize s':>11}{'kept fp32':>10}{'fp16 nodes':>11}"
        f"{'cosine':>11}{'task metric':>26}{'force_fp16 cos':>16}"
    ]
    for name, row in results["models"].items():
        if "error" in row:
            lines.append(f"{name:<28}{results['variant']:<8}  FAILED: {row['error'][:120]}")
            continue
        metrics = row["task_metrics"]
        if row["task"] == "classify":
            task_text = f"top1 {metrics['top1']:.3f} top5 {metrics['top5']:.3f}"
        elif row["task"] == "segment":
            task_text = f"mIoU {metrics['mean_iou']:.4f}"
        else:
            ap50, ap = metrics["AP50"], metrics["AP50:95"]
            task_text = ("no GT" if ap50 is None else f"AP50 {ap50:.3f} AP50:95 {ap:.3f}")
        lines.append(
            f"{name:<28}{results['variant']:<8}{row['quantize_seconds']:>11.1f}"
            f"{row['kept_fp32']:>10}{row['fp16_nodes']:>11}{row['cosine']:>11.6f}"
            f"{task_text:>26}{row['force_fp16_cosine']:>16.6f}"
        )
    lines.append(f"(host, FP16 storage emulated; {results['samples']} random samples; detection "
                 f"ground truth = FP32 boxes with score > {results['gt_conf']})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: the catalogue; with "
                        f"--int8: {','.join(quantize_int8.MODELS)})")
    parser.add_argument("--int8", action="store_true",
                        help="benchmark quantize --int8 (bench/quantize_int8.py) instead")
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--samples", type=int, default=4, help="random samples for the scores")
    parser.add_argument("--gt-conf", type=float, default=0.1)
    parser.add_argument("--json", help="default bench/results/quantize.json (--int8: "
                        "quantize_int8.json)")
    args = parser.parse_args()
    if args.int8:
        quantize_int8.main((args.models or ",".join(quantize_int8.MODELS)).split(","),
                           Path(args.json or quantize_int8.DEFAULT_JSON))
        return
    args.models = args.models or ",".join(CATALOGUE)
    args.json = args.json or str(RESULTS / "quantize.json")
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    results: dict = {"variant": args.variant, "samples": args.samples, "gt_conf": args.gt_conf,
                     "models": {}}
    for name in [n for n in args.models.split(",") if n]:
        print(f"[{name}] export, quantize, score", flush=True)
        try:
            source = export_catalogue_model(name, args.variant)
            target = MODELS_DIR / f"{name}.{args.variant}.fp16.onnx"
            report_path = MODELS_DIR / f"{name}.{args.variant}.fp16.json"
            seconds, code = quantize_in_fresh_process(source, target, report_path)
            report = json.loads(report_path.read_text())
            row = {
                "quantize_seconds": round(seconds, 2),
                "quantize_exit_code": code,
                "kept_fp32": len(report["keep_fp32"]["nodes"]),
                "kept_by_rule": _count_rules(report["decisions"]),
                "fp16_nodes": report["conversion"]["fp16_nodes"],
                "casts_inserted": report["conversion"]["casts_inserted"],
                "search_evaluations": (report["search"] or {}).get("evaluations"),
                "gate_cosine": min(g["cosine"] for g in report["gate"]["outputs"]),
            }
            row.update(score(name, source, target, args.samples, args.gt_conf))
        except Exception as exc:  # noqa: BLE001 - record the failure, benchmark the rest
            row = {"error": f"{type(exc).__name__}: {exc}"}
        results["models"][name] = row
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(render(results))
    print(f"\nwrote {args.json}")


def _count_rules(decisions: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for decision in decisions:
        counts[decision["rule"]] = counts.get(decision["rule"], 0) + 1
    return counts


if __name__ == "__main__":
    main()
