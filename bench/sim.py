"""The sim backend on the full-size catalogue: its error against the FP32 host, next to what the
FP16 analysis of the same build predicted.

For each catalogue model: export the FP32 ONNX, optimize it, run the FP16 analysis (``quantize``
with ``--keep-fp32 auto``, its report: per-output cosine and max abs error of the FP16 model
against the FP32 one on seeded random inputs), compile a BUILD_DIR for Ascend310B4 with the
default precision (``force_fp16``) and the report's keep list, then run the build on ``sim`` and
on ``cpu`` on the same inputs. Per output it prints the predicted and the measured agreement,
whether the measurement is within the prediction (``within_prediction``: up to two FP16 steps of
the output's largest value and 1.5x the cosine deficit), whether the sim's I/O specs equal the
manifest's, the estimated board footprint, and the time of one run on each backend.

    python -m bench.sim                                   # every model, full size
    python -m bench.sim --variant tiny --models yolov5s,resnet50

Prints a table and writes bench/results/sim.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import onnx

from bench._harness import MODELS_DIR, RESULTS
from edgefuse import open_session
from edgefuse.acl.compile.compile import compile_model
from edgefuse.fallback.sim_numerics import within_prediction
from edgefuse.fallback.sim_target import format_bytes
from edgefuse.manifest import read_manifest
from edgefuse.models import CATALOGUE, get_entry
from edgefuse.quantize import DEFAULT_SAMPLES
from edgefuse.reference.compare import Gate, compare_outputs
from edgefuse.reference.feeds import feed_set, input_specs
from edgefuse.session import TensorSpec

SOC = "Ascend310B4"


def measure(name: str, variant: str, threads: int, runs: int) -> dict:
    import onnx_ir as ir

    from edgefuse.convert import convert
    from edgefuse.optimize import optimize
    from edgefuse.quantize import quantize

    entry = get_entry(name)
    start = time.perf_counter()
    optimized = optimize(convert(entry.build(variant), inputs=entry.shapes(variant)[0])).model
    if not isinstance(optimized, onnx.ModelProto):
        optimized = ir.serde.serialize_model(optimized)
    report = quantize(optimized).report
    quantize_s = time.perf_counter() - start
    build = MODELS_DIR / f"{name}.{variant}.sim-build"
    shutil.rmtree(build, ignore_errors=True)
    compile_model(optimized, SOC, build, keep_fp32=report.keep)
    manifest = read_manifest(build)
    feeds = feed_set(input_specs(optimized), None, seed=0, samples=DEFAULT_SAMPLES)
    with open_session(build, backends="sim", threads=threads) as sim, \
            open_session(build, backends="cpu", threads=threads) as cpu:
        specs_equal = (list(sim.inputs) == [_spec(e) for e in manifest.inputs]
                       and list(sim.outputs) == [_spec(e) for e in manifest.outputs])
        host = [cpu.run(f) for f in feeds]
        simulated = [sim.run(f) for f in feeds]
        timing = {backend: _time(session, feeds[0], runs)
                  for backend, session in (("sim", sim), ("cpu", cpu))}
        footprint = sim.footprint
    predicted = {g.name: g.agreement for g in report.gate}
    outputs = []
    for measured in compare_outputs(host, simulated, Gate(0.999)):
        largest = max(float(np.abs(h[measured.name]).max()) for h in host)
        expected = predicted[measured.name]
        outputs.append({
            "name": measured.name,
            "predicted": expected.to_json(),
            "measured": measured.agreement.to_json(),
            "largest": largest,
            "within_prediction": within_prediction(measured.agreement, expected, largest),
        })
    return {
        "kept_fp32": len(report.decisions),
        "specs_equal_manifest": specs_equal,
        "outputs": outputs,
        "footprint": footprint.to_json(),
        "footprint_text": footprint.describe(),
        "run_ms": timing,
        "prepare_seconds": round(quantize_s, 1),
    }


def _spec(entry) -> TensorSpec:
    return TensorSpec(entry.name, tuple(entry.shape), np.dtype(entry.dtype))


def _time(session, feeds: dict, runs: int) -> float:
    session.run(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(feeds)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def render(results: dict) -> str:
    lines = [f"{'model':<27}{'output':<9}{'pred cos':>11}{'sim cos':>11}{'pred maxabs':>12}"
             f"{'sim maxabs':>11}{'within':>7}{'specs':>6}{'kept':>5}{'footprint':>11}"
             f"{'sim ms':>8}{'cpu ms':>8}"]
    for name, row in results["models"].items():
        if "error" in row:
            lines.append(f"{name:<27}FAILED: {row['error'][:150]}")
            continue
        for output in row["outputs"]:
            pred, meas = output["predicted"], output["measured"]
            lines.append(
                f"{name:<27}{output['name'][:8]:<9}{pred['cosine']:>11.7f}"
                f"{meas['cosine']:>11.7f}{pred['max_abs_error']:>12.4g}"
                f"{meas['max_abs_error']:>11.4g}{'yes' if output['within_prediction'] else 'NO':>7}"
                f"{'=' if row['specs_equal_manifest'] else 'DIFF':>6}{row['kept_fp32']:>5}"
                f"{format_bytes(row['footprint']['total']):>11}{row['run_ms']['sim']:>8.1f}"
                f"{row['run_ms']['cpu']:>8.1f}")
    lines.append(f"({results['variant']} models, {SOC}, force_fp16 with quantize's keep list; "
                 f"{DEFAULT_SAMPLES} seeded random samples; pred = the FP16 analysis (quantize "
                 "report), sim = sim vs cpu on the build; footprint = weights + peak activations "
                 "+ I/O; ms = median of one run, "
                 f"{results['threads']} thread(s))")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CATALOGUE), help="comma-separated names")
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per backend")
    parser.add_argument("--json", default=str(RESULTS / "sim.json"))
    args = parser.parse_args()
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    results: dict = {"variant": args.variant, "threads": args.threads, "soc": SOC, "models": {}}
    for name in [n for n in args.models.split(",") if n]:
        print(f"[{name}] export, optimize, quantize, compile, sim vs cpu", flush=True)
        try:
            results["models"][name] = measure(name, args.variant, args.threads, args.runs)
        except Exception as exc:  # noqa: BLE001 - record the failure, measure the rest
            results["models"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(render(results))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
