"""Benchmark PyTorch -> ONNX export paths, and `edgefuse convert`, on one model.

Why: convert's default exporter is chosen by these figures (see edgefuse/convert/torch_export.py),
and edgefuse's canonical graph must not be slower than the best an exporter plus onnxscript's
optimizer gives. For a model built by a ``package.module:factory`` this records, per path: opset,
node count, BatchNormalization nodes left, max |difference| to PyTorch, export (+ convert) time,
and ONNX Runtime CPU latency (ENABLE_ALL, 2 threads, fresh interleaved processes, paired ratio
against the TorchScript exporter's graph).

    python -m bench.convert                                  # edgefuse.models:resnet50
    python -m bench.convert --model mypkg.nets:resnet50 --input 1,3,224,224 --reps 5

Prints a table and writes bench/results/convert.json.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

from bench._harness import MODELS_DIR, RESULTS, ROOT, Config, interleaved
from edgefuse.convert import convert
from edgefuse.convert.input_spec import parse_input_spec
from edgefuse.convert.torch_export import build_from_factory
from edgefuse.reference.onnx_runner import run_onnx

BASELINE = "torchscript-17"


def export_paths(module, example) -> dict[str, tuple[onnx.ModelProto, float]]:
    """Each raw exporter path and the onnxscript optimizer on the unoptimized dynamo graph."""
    import onnxscript.optimizer
    import torch

    def timed(make):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make()
        return model, time.perf_counter() - start

    def torchscript():
        buffer = io.BytesIO()
        torch.onnx.export(module, (example,), buffer, dynamo=False, opset_version=17,
                          input_names=["input"])
        return onnx.load_from_string(buffer.getvalue())

    def dynamo(**options):
        return torch.onnx.export(module, (example,), dynamo=True, verbose=False,
                                 input_names=["input"], **options).model_proto

    paths = {
        BASELINE: timed(torchscript),
        "dynamo-18": timed(lambda: dynamo(opset_version=18)),
        "dynamo-raw": timed(lambda: dynamo(optimize=False)),
    }
    raw, raw_seconds = paths["dynamo-raw"]
    optimized, optimize_seconds = timed(lambda: onnxscript.optimizer.optimize(raw))
    paths["dynamo-raw+onnxscript"] = (optimized, raw_seconds + optimize_seconds)
    return paths


def edgefuse_paths(spec: str, shape: tuple[int, ...]) -> dict[str, tuple[onnx.ModelProto, float]]:
    paths = {}
    for exporter in ("auto", "torchscript"):
        start = time.perf_counter()
        model = convert(spec, inputs={"input": shape}, exporter=exporter)
        paths[f"edgefuse-{exporter}"] = (model, time.perf_counter() - start)
    return paths


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="edgefuse.models:resnet50",
                        help="package.module:factory returning the eval-mode nn.Module")
    parser.add_argument("--input", default="1,3,224,224", help="input shape")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", default=str(RESULTS / "convert.json"))
    args = parser.parse_args()
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    _, shape = parse_input_spec(args.input)
    module = build_from_factory(args.model).eval()
    example = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = module(example).numpy()
    paths = {**export_paths(module, example), **edgefuse_paths(args.model, shape)}
    rows: dict[str, dict] = {}
    for name, (model, seconds) in paths.items():
        path = MODELS_DIR / f"convert.{name}.onnx"
        onnx.save(model, path)
        ops = collections.Counter(node.op_type for node in model.graph.node)
        output = next(iter(run_onnx(model, {model.graph.input[0].name: example.numpy()}).values()))
        rows[name] = {
            "opset": next(e.version for e in model.opset_import if e.domain in ("", "ai.onnx")),
            "nodes": len(model.graph.node),
            "batchnorm": ops.get("BatchNormalization", 0),
            "max_abs_vs_torch": float(np.max(np.abs(output - reference))),
            "seconds": round(seconds, 2),
            "file": str(path.relative_to(ROOT)),
        }
        print(f"{name}: {rows[name]}", flush=True)
    configs = [Config(name, ["--onnx", str(ROOT / row["file"]), "--level", "all"])
               for name, row in rows.items()]
    measured = interleaved(configs, reps=args.reps, runs=args.runs)
    print(f"\n{args.model} {list(shape)}: ORT CPU ENABLE_ALL, 2 threads, {args.reps} interleaved "
          f"processes x {args.runs} runs; ratio = paired vs {BASELINE}")
    print(f"{'path':<24}{'opset':>6}{'nodes':>7}{'BN':>4}{'max|d|':>9}{'export s':>9}"
          f"{'ms':>8}{'ratio':>7}  range")
    for name, row in rows.items():
        result = measured[name]
        row["latency"] = result.to_json()
        timing = (f"{result.median_ms:>8.1f}{result.paired_ratio:>7.3f}  "
                  f"[{min(result.ratios):.2f}, {max(result.ratios):.2f}]"
                  if result.ratios else f"  FAILED: {result.error}")
        print(f"{name:<24}{row['opset']:>6}{row['nodes']:>7}{row['batchnorm']:>4}"
              f"{row['max_abs_vs_torch']:>9.1e}{row['seconds']:>9.1f}{timing}")
    Path(args.json).write_text(json.dumps({"model": args.model, "shape": list(shape),
                                           "reps": args.reps, "runs": args.runs, "rows": rows},
                                          indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
