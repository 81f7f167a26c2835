"""Where the time goes, before and after `edgefuse optimize`, on the catalogue's vision models.

For each model (ResNet-50, YOLOv8n, DeepLabV3+ by default), the FP32 ONNX that `edgefuse
convert` writes and its `edgefuse optimize --target cpu` result are each:
- profiled on the CPU under ONNX Runtime's profiler (`edgefuse profile`): the table's total
  (sum of the kernels' medians) and its whole-run median;
- timed by `edgefuse bench` (p50 of the same backend, inputs and thread count), so the profile's
  total can be checked against what bench measures (the issue asks for within 5%);
- given the board's floor on Ascend310B4 (a LOWER BOUND from published peaks, never a
  prediction).
The pair is compared (`--compare`): the time each optimize rule saved. The host's own peak is
measured with a large float32 GEMM (numpy's BLAS, best of several), so the achieved GFLOP/s of
each model can be read against what this machine can do.

    python -m bench.profile                                   # the three models
    python -m bench.profile --models resnet50 --runs 20

Prints a table and writes bench/results/profile.json. Every figure is measured on the machine
that runs it; nothing here runs on a board.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from bench._harness import MODELS_DIR, RESULTS, export_catalogue_model
from edgefuse.benchmark import bench
from edgefuse.optimize import optimize
from edgefuse.profile.compare import compare
from edgefuse.profile.run import profile

DEFAULT_MODELS = ("resnet50", "yolov8n", "deeplabv3plus_mobilenetv2")
SOC = "Ascend310B4"


def host_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """This machine's float32 GEMM rate: best of ``repeats`` ``size``-square matmuls."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b  # warm-up: thread pool and caches
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def model_file(name: str) -> str:
    path = MODELS_DIR / f"{name}.full.fp32.onnx"
    return str(path if path.is_file() else export_catalogue_model(name, "full"))


def measure(name: str, runs: int, warmup: int, threads: int | None, peak: float) -> dict:
    before = model_file(name)
    after = str(MODELS_DIR / f"{name}.full.fp32.optimized.onnx")
    optimize(before, output=after, target="cpu")
    options = {"threads": threads} if threads else {}
    result: dict = {"model": name}
    reports = []
    for label, path in (("before", before), ("after", after)):
        started = time.perf_counter()
        report = profile(path, "cpu", runs=runs, warmup=warmup, soc=SOC, **options)
        seconds = time.perf_counter() - started
        timed = bench(path, "cpu", strict=True, warmup=warmup, iterations=runs,
                      compare_onnxruntime=False, **options)
        p50 = timed.results["edgefuse/cpu"].p50_ms
        flops = sum(row.flops or 0 for row in report.rows)
        reports.append(report)
        result[label] = {
            "bench_p50_ms": p50,
            "profile_kernels_ms": report.total_us / 1e3,
            "profile_run_ms": report.wall_us / 1e3,
            "kernels_vs_bench": report.total_us / 1e3 / p50 - 1,
            "run_vs_bench": report.wall_us / 1e3 / p50 - 1,
            "profile_seconds": seconds,
            "gflop": flops / 1e9,
            "achieved_gflops": flops / report.total_us / 1e3 if report.total_us else None,
            "share_of_host_peak": flops / report.total_us / 1e3 / peak if report.total_us
            else None,
            "floor_ms_lower_bound": (report.floor_us or 0) / 1e3,
            "memory_bound_nodes": sum(1 for row in report.rows if row.memory_bound),
            "nodes": len(report.rows),
        }
    comparison = compare(*reports)
    result["rules"] = [{"rule": s.rule, "groups": s.groups, "saved_ms": s.saved_us / 1e3}
                       for s in comparison.savings]
    return result


def render(results: list[dict], peak: float) -> str:
    lines = [f"host peak (float32 GEMM 2048^3, numpy BLAS): {peak:.1f} GFLOP/s",
             f"floor = a LOWER BOUND on {SOC} from its published peaks, not a prediction", "",
             f"{'model':<28}{'':<7}{'bench p50':>10}{'kernels':>9}{'run':>9}{'run/bench':>10}"
             f"{'GFLOP':>7}{'GFLOP/s':>9}{'of peak':>8}{'floor ms':>9}{'mem-bound':>10}"]
    for result in results:
        for label in ("before", "after"):
            r = result[label]
            lines.append(
                f"{result['model'][:27]:<28}{label:<7}{r['bench_p50_ms']:>10.2f}"
                f"{r['profile_kernels_ms']:>9.2f}{r['profile_run_ms']:>9.2f}"
                f"{100 * r['run_vs_bench']:>+9.1f}%{r['gflop']:>7.2f}"
                f"{r['achieved_gflops'] or 0:>9.1f}{100 * (r['share_of_host_peak'] or 0):>7.1f}%"
                f"{r['floor_ms_lower_bound']:>9.3f}{r['memory_bound_nodes']:>5}/{r['nodes']:<4}")
    lines += ["", f"{'model':<28}{'time saved by':<34}{'groups':>7}{'saved ms':>10}"]
    for result in results:
        for rule in result["rules"]:
            lines.append(f"{result['model'][:27]:<28}{rule['rule'][:33]:<34}{rule['groups']:>7}"
                         f"{rule['saved_ms']:>+10.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    peak = host_peak_gflops()
    results = [measure(name, args.runs, args.warmup, args.threads, peak)
               for name in args.models.split(",")]
    print(render(results, peak))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "profile.json"
    out.write_text(json.dumps({"host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                                        "peak_gflops": peak},
                               "soc": SOC, "runs": args.runs, "warmup": args.warmup,
                               "models": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
