"""Benchmark the runtime: Session.run's overhead over raw ONNX Runtime, and CPU latency of the
catalogue models on ONNX Runtime against PyTorch eager.

Part 1, overhead (one process, interleaved): one CPU ``Session`` per model; the raw runner calls
``InferenceSession.run`` on that session's own ONNX Runtime session, so the difference is exactly
what edgefuse adds (name/dtype/shape validation, dict building). Blocks of calls alternate raw,
edgefuse (validate on), edgefuse (validate off), in rotating order; each block gives a median per
runner, the overhead is the median over blocks of (edgefuse - raw). The overhead does not depend
on the model's size, so the tiny model's figure divided by ResNet-50's latency is shown too: on a
loaded machine it is the steadier estimate. Gates: <= 3 % on ResNet-50 (measured directly) and
<= 30 us on a tiny model.

Part 2, CPU latency (fresh processes, interleaved, paired ratios; bench/_harness.py): ONNX Runtime
at full graph optimization with the same thread count and options an edgefuse CPU session uses,
against PyTorch eager, on the full-size catalogue models (TorchScript exporter, opset 17). Gate:
ResNet-50 on ONNX Runtime >= 1.8x faster than eager.

    python -m bench.runtime                          # both parts, every catalogue model
    python -m bench.runtime --models resnet50,mobilenetv2 --reps 3 --runs 20
    python -m bench.runtime --no-latency             # overhead only

Prints a table and writes bench/results/runtime.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh

from bench._harness import MODELS_DIR, RESULTS, ROOT, Config, interleaved
from bench.optimize import export
from edgefuse.models import CATALOGUE
from edgefuse.reference.feeds import random_feeds
from edgefuse.runtime import open_session

THREADS = 2
GATES = {"resnet50_overhead_pct": 3.0, "tiny_overhead_us": 30.0, "resnet50_speedup": 1.8}


def tiny_model() -> onnx.ModelProto:
    """Relu(x) + 1 on a [1, 16] input: ONNX Runtime's own cost per call is a few microseconds."""
    one = onnx.numpy_helper.from_array(np.ones(16, np.float32), "one")
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Add", ["r", "one"], ["y"])], "tiny",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16])], [one])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def catalogue_onnx(name: str) -> Path:
    """The full-size catalogue model exported as bench/optimize.py does, cached on disk."""
    path = MODELS_DIR / f"{name}.ts.onnx"
    if not path.exists():
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        onnx.save(export(name, "ts"), str(path))
    return path


def overhead(label: str, model: onnx.ModelProto | Path, *, blocks: int,
             calls: int) -> dict[str, float | int | str]:
    """Session.run minus InferenceSession.run on the same ONNX Runtime session, interleaved."""
    with open_session(model, backends="cpu", threads=THREADS) as session:
        feeds = random_feeds(session.inputs)
        raw = session.ort_session

        runners: dict[str, Callable[[], object]] = {
            "raw": lambda: raw.run(None, feeds),
            "edgefuse": lambda: session.run(feeds),
            "edgefuse-no-validate": lambda: session.run(feeds),
        }
        for run in runners.values():
            for _ in range(max(3, calls)):
                run()
        medians: dict[str, list[float]] = {name: [] for name in runners}
        names = list(runners)
        for block in range(blocks):
            shift = block % len(names)
            for name in names[shift:] + names[:shift]:
                session.validate = name != "edgefuse-no-validate"
                times = []
                for _ in range(calls):
                    start = time.perf_counter()
                    runners[name]()
                    times.append(time.perf_counter() - start)
                medians[name].append(statistics.median(times))
    raw_median = statistics.median(medians["raw"])
    result: dict[str, float | int | str] = {
        "model": label, "blocks": blocks, "calls_per_block": calls,
        "raw_us": raw_median * 1e6,
    }
    for name in ("edgefuse", "edgefuse-no-validate"):
        diffs = [ours - base for ours, base in zip(medians[name], medians["raw"], strict=True)]
        result[f"{name}_us"] = statistics.median(medians[name]) * 1e6
        result[f"{name}_overhead_us"] = statistics.median(diffs) * 1e6
        result[f"{name}_overhead_pct"] = 100 * statistics.median(diffs) / raw_median
    return result


def cpu_latency(names: list[str], reps: int, runs: int) -> dict[str, dict]:
    rows = {}
    for name in names:
        path = catalogue_onnx(name)
        print(f"[{name}] latency: {reps} reps x {runs} runs per process, {THREADS} threads")
        configs = [Config("torch-eager", ["--torch-model", name]),
                   Config("onnxruntime", ["--onnx", str(path.relative_to(ROOT)), "--level",
                                          "all"])]
        measured = interleaved(configs, reps=reps, runs=runs, threads=THREADS)
        row = {key: value.to_json() for key, value in measured.items()}
        ratio = row["onnxruntime"]["paired_ratio"]
        row["speedup_vs_eager"] = 1 / ratio if ratio else None
        rows[name] = row
    return rows


def render(results: dict) -> str:
    lines = ["Session.run overhead over InferenceSession.run (same ORT session, CPU, "
             f"{THREADS} threads; median of per-block differences)",
             f"{'model':<12}{'raw':>12}{'edgefuse':>12}{'overhead':>12}{'':>9}"
             f"{'no-validate':>13}{'overhead':>12}"]
    for row in results["overhead"]:
        lines.append(
            f"{row['model']:<12}{row['raw_us']:>10.1f}us{row['edgefuse_us']:>10.1f}us"
            f"{row['edgefuse_overhead_us']:>10.2f}us{row['edgefuse_overhead_pct']:>8.3f}%"
            f"{row['edgefuse-no-validate_us']:>11.1f}us"
            f"{row['edgefuse-no-validate_overhead_us']:>10.2f}us")
    by_model = {row["model"]: row for row in results["overhead"]}
    if {"tiny", "resnet50"} <= by_model.keys():
        derived = 100 * by_model["tiny"]["edgefuse_overhead_us"] / by_model["resnet50"]["raw_us"]
        lines.append(f"(tiny-model overhead / ResNet-50 latency = {derived:.4f} %)")
    if results.get("cpu_latency"):
        lines += ["", "CPU latency, fresh processes interleaved (median of process medians; "
                      "speedup = 1 / median paired ratio)",
                  f"{'model':<28}{'eager ms':>10}{'ORT ms':>10}{'speedup':>9}"]
        for name, row in results["cpu_latency"].items():
            eager, ours = row["torch-eager"]["median_ms"], row["onnxruntime"]["median_ms"]
            speedup = row["speedup_vs_eager"]
            lines.append(f"{name:<28}{eager or float('nan'):>10.1f}{ours or float('nan'):>10.1f}"
                         f"{speedup or float('nan'):>8.2f}x")
    lines += ["", "gates:"]
    lines += [f"  {'PASS' if ok else 'FAIL'} {name}: {detail}"
              for name, (ok, detail) in results["gates"].items()]
    return "\n".join(lines)


def gates(results: dict) -> dict[str, tuple[bool, str]]:
    found = {}
    by_model = {row["model"]: row for row in results["overhead"]}
    if "resnet50" in by_model:
        pct = by_model["resnet50"]["edgefuse_overhead_pct"]
        found["resnet50_overhead_pct"] = (pct <= GATES["resnet50_overhead_pct"],
                                          f"{pct:.2f} % <= {GATES['resnet50_overhead_pct']} %")
    if "tiny" in by_model:
        us = by_model["tiny"]["edgefuse_overhead_us"]
        found["tiny_overhead_us"] = (us <= GATES["tiny_overhead_us"],
                                     f"{us:.2f} us <= {GATES['tiny_overhead_us']} us")
    speedup = results.get("cpu_latency", {}).get("resnet50", {}).get("speedup_vs_eager")
    if speedup is not None:
        found["resnet50_speedup"] = (speedup >= GATES["resnet50_speedup"],
                                     f"{speedup:.2f}x >= {GATES['resnet50_speedup']}x")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CATALOGUE),
                        help="comma-separated catalogue models for the latency part")
    parser.add_argument("--no-latency", action="store_true", help="overhead part only")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tiny-blocks", type=int, default=40)
    parser.add_argument("--resnet-blocks", type=int, default=60)
    parser.add_argument("--json", default=str(RESULTS / "runtime.json"))
    args = parser.parse_args()

    results: dict = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                 "threads": THREADS}}
    print("[overhead] tiny model")
    rows = [overhead("tiny", tiny_model(), blocks=args.tiny_blocks, calls=500)]
    print("[overhead] resnet50 (exporting if needed)")
    # One call per runner per block: adjacent calls see the same machine load, which matters on
    # a shared machine where a ResNet-50 call's time wanders by more than the overhead.
    rows.append(overhead("resnet50", catalogue_onnx("resnet50"), blocks=args.resnet_blocks,
                         calls=1))
    results["overhead"] = rows
    if not args.no_latency:
        results["cpu_latency"] = cpu_latency(
            [n.strip() for n in args.models.split(",") if n.strip()], args.reps, args.runs)
    results["gates"] = gates(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(
        {**results, "gates": {k: {"ok": ok, "detail": d} for k, (ok, d) in
                              results["gates"].items()}}, indent=2))
    print(render(results))
    print(f"\nwrote {args.json}")
    return 0 if all(ok for ok, _ in results["gates"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
