"""Benchmark `edgefuse compile` on the full-size catalogue models, without ATC.

No CANN toolkit exists on this machine, so what can be measured is everything edgefuse does before
ATC runs: for each catalogue model, the FP32 ONNX from ``edgefuse convert`` and the same model
after ``edgefuse optimize --target SOC`` (SiLU rewritten to the Swish custom op) are compiled to
a BUILD_DIR. The table gives the opset prepare chose, what it changed, the op-support check's
errors and warnings, the parity of the prepared ONNX against its input on ONNX Runtime CPU (the
gate is cosine >= 0.99999), the custom-op nodes that reach ATC, and the wall time of compile.

    python -m bench.compile
    python -m bench.compile --models yolov8n --variant tiny

Prints a table and the compile.sh of the first model, and writes bench/results/compile.json.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from bench._harness import MODELS_DIR, RESULTS, ROOT, export_catalogue_model
from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.ops.registry import OPS_BY_NAME
from edgefuse.models import CATALOGUE
from edgefuse.optimize import optimize

SOC = "Ascend310B4"
BUILDS = MODELS_DIR / "builds"


def compile_one(source: Path, build_dir: Path) -> dict:
    start = time.perf_counter()
    result = compile_model(source, SOC, build_dir, overwrite=True)
    seconds = time.perf_counter() - start
    prepare = result.prepared.to_json()
    ops = Counter(node.op_type for node in result.prepared.model.graph.node)  # as written
    op_support = result.manifest.extra["op_support"]
    return {
        "seconds": round(seconds, 2),
        "source_opset": prepare["source_opset"],
        "opset": prepare["opset"],
        "changes": prepare["changes"],
        "parity_checked": prepare["parity"]["checked"],
        "min_cosine": prepare["parity"].get("min_cosine"),
        "op_support_errors": op_support["errors"],
        "op_support_warnings": op_support["warnings"],
        "nodes": sum(ops.values()),
        "custom_nodes": {op: ops[op] for op in OPS_BY_NAME if ops[op]},
        "argv": result.argv,
    }


def render(results: dict) -> str:
    lines = [f"{'model':<28}{'graph':<10}{'opset':>9}{'nodes':>7}{'errors':>7}{'warn':>6}"
             f"{'min cosine':>12}{'custom ops':>18}{'s':>7}"]
    for name, rows in results["models"].items():
        for graph, row in rows.items():
            if "error" in row:
                lines.append(f"{name:<28}{graph:<10}  FAILED: {row['error'][:120]}")
                continue
            custom = ",".join(f"{op}x{n}" for op, n in row["custom_nodes"].items()) or "-"
            cosine = f"{row['min_cosine']:.8f}" if row["parity_checked"] else "unchecked"
            lines.append(
                f"{name:<28}{graph:<10}{row['source_opset']:>4}->{row['opset']:<3}"
                f"{row['nodes']:>7}{row['op_support_errors']:>7}{row['op_support_warnings']:>6}"
                f"{cosine:>12}{custom:>18}{row['seconds']:>7.1f}")
    lines.append(f"(soc {results['soc']}, variant {results['variant']}; parity: prepared ONNX "
                 "vs its input on ONNX Runtime CPU, FP32, before ATC)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CATALOGUE), help="comma-separated names")
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--json", default=str(RESULTS / "compile.json"))
    args = parser.parse_args()
    BUILDS.mkdir(parents=True, exist_ok=True)
    results: dict = {"soc": SOC, "variant": args.variant, "models": {}}
    for name in [n for n in args.models.split(",") if n]:
        print(f"[{name}] convert, optimize for {SOC}, compile", flush=True)
        source = export_catalogue_model(name, args.variant)
        ascend = MODELS_DIR / f"{name}.{args.variant}.{SOC}.onnx"
        optimize(source, target=SOC, output=ascend)
        rows = {}
        for graph, path in (("convert", source), ("optimize", ascend)):
            try:
                rows[graph] = compile_one(path, BUILDS / f"{name}.{args.variant}.{graph}")
            except Exception as exc:  # noqa: BLE001 - record the failure, compile the rest
                rows[graph] = {"error": f"{type(exc).__name__}: {exc}"}
        results["models"][name] = rows
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(render(results))
    first = next(iter(results["models"]))
    script = BUILDS / f"{first}.{args.variant}.convert" / "compile.sh"
    if script.exists():
        print(f"\n{script.relative_to(ROOT)}:\n{script.read_text()}")
    print(f"wrote {args.json}; the builds are in {BUILDS.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
