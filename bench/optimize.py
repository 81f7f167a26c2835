"""Benchmark `edgefuse optimize` against its peers on the catalogue models.

For each catalogue model and each input graph (the TorchScript exporter's graph, `ts`, and the
unfused graph the dynamo exporter gives with ``optimize=False``, `dynraw`) this script records:
node counts for the input, edgefuse's output and each peer's output (onnxslim, onnxsim,
onnxscript's optimizer), optimize time, FP32 parity of edgefuse's output against the input, and
ONNX Runtime CPU latency (2 threads, graph optimizations disabled and fully enabled) of every
graph plus PyTorch eager, measured in fresh, interleaved processes and reported as paired ratios
against the TorchScript graph at full ORT optimization.

    python -m bench.optimize                      # every model, structure and latency
    python -m bench.optimize --models resnet50 --reps 3 --runs 30
    python -m bench.optimize --no-latency         # node counts and parity only (fast)

Prints a table and writes bench/results/optimize.json.
"""

from __future__ import annotations

import argparse
import io
import json
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

from bench._harness import MODELS_DIR, RESULTS, ROOT, Config, interleaved
from edgefuse.convert.torch_export import export_unfused
from edgefuse.models import CATALOGUE, get_entry
from edgefuse.optimize import optimize
from edgefuse.reference.compare import compare_arrays
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import run_onnx

GRAPHS = ("ts", "dynraw")
PEERS = ("onnxslim", "onnxsim", "onnxscript")


def export(name: str, graph: str) -> onnx.ModelProto:
    """The catalogue model ``name`` as exported by the ``graph`` path."""
    import torch

    entry = get_entry(name)
    module = entry.build("full")
    example = (torch.randn(*entry.input_shape, generator=torch.Generator().manual_seed(0)),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if graph == "ts":
            buffer = io.BytesIO()
            torch.onnx.export(module, example, buffer, dynamo=False, opset_version=17,
                              input_names=["input"])
            return onnx.load_from_string(buffer.getvalue())
        return export_unfused(module, example, input_names=["input"])


def run_peer(peer: str, model: onnx.ModelProto) -> onnx.ModelProto:
    if peer == "onnxslim":
        import onnxslim

        return onnxslim.slim(model)
    if peer == "onnxsim":
        import onnxsim

        simplified, ok = onnxsim.simplify(model)
        if not ok:
            raise RuntimeError("onnxsim's own check failed")
        return simplified
    import onnxscript.optimizer

    return onnxscript.optimizer.optimize(model)


def loads_in_ort(model: onnx.ModelProto) -> str | None:
    import onnxruntime as ort

    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - a peer's invalid output is a result to record
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None


def structure(name: str, graph: str) -> dict:
    """Export, optimize with edgefuse and each peer; node counts, times, parity; save the files."""
    source = export(name, graph)
    row: dict = {"input_nodes": len(source.graph.node), "graphs": {}}
    files = {"input": MODELS_DIR / f"{name}.{graph}.onnx"}
    onnx.save(source, files["input"])
    start = time.perf_counter()
    result = optimize(source)
    row["edgefuse_seconds"] = round(time.perf_counter() - start, 3)
    row["edgefuse_nodes"] = len(result.model.graph.node)
    row["edgefuse_ops"] = result.report.ops_after
    files["edgefuse"] = MODELS_DIR / f"{name}.{graph}.edgefuse.onnx"
    onnx.save(result.model, files["edgefuse"])
    feeds = random_feeds(input_specs(source))
    reference = run_onnx(source, feeds)
    candidate = run_onnx(result.model, feeds)
    parity = []
    for out_name, ref in reference.items():
        cosine, max_abs, rel_l2 = compare_arrays(ref, candidate[out_name])
        parity.append({"output": out_name, "cosine": cosine, "max_abs": max_abs, "rel_l2": rel_l2})
    row["parity"] = parity
    for peer in PEERS:
        start = time.perf_counter()
        try:
            peer_model = run_peer(peer, source)
        except Exception as exc:  # noqa: BLE001 - record the peer's failure, keep benchmarking
            row[f"{peer}_error"] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        row[f"{peer}_seconds"] = round(time.perf_counter() - start, 3)
        row[f"{peer}_nodes"] = len(peer_model.graph.node)
        invalid = loads_in_ort(peer_model)
        if invalid:
            row[f"{peer}_error"] = invalid
            continue
        files[peer] = MODELS_DIR / f"{name}.{graph}.{peer}.onnx"
        onnx.save(peer_model, files[peer])
    row["files"] = {k: str(v.relative_to(ROOT)) for k, v in files.items()}
    return row


def latency(name: str, rows: dict, reps: int, runs: int) -> dict:
    configs = []
    for graph in GRAPHS:
        for kind, path in rows[graph]["files"].items():
            for level in ("all", "disable"):
                configs.append(Config(f"{graph}:{kind}:{level}",
                                      ["--onnx", path, "--level", level]))
    configs.append(Config("torch-eager", ["--torch-model", name]))
    # The baseline (first) is the TorchScript exporter's graph at full ORT optimization.
    measured = interleaved(configs, reps=reps, runs=runs)
    return {key: value.to_json() for key, value in measured.items()}


def render(results: dict) -> str:
    lines = []
    header = f"{'model':<28}{'graph':<8}{'input':>7}{'edgefuse':>9}" + "".join(
        f"{p:>11}" for p in PEERS) + f"{'opt s':>7}{'min cos':>12}{'max relL2':>11}"
    lines.append(header)
    for name, model in results["models"].items():
        for graph in GRAPHS:
            row = model.get(graph)
            if not row:
                continue
            peers = "".join(
                f"{row.get(f'{p}_nodes', '-')!s:>10}{'!' if f'{p}_error' in row else ' '}"
                for p in PEERS)
            cos = min(p["cosine"] for p in row["parity"])
            rel = max(p["rel_l2"] for p in row["parity"])
            lines.append(f"{name:<28}{graph:<8}{row['input_nodes']:>7}{row['edgefuse_nodes']:>9}"
                         f"{peers}{row['edgefuse_seconds']:>7.2f}{cos:>12.8f}{rel:>11.2e}")
    lines.append("('!' = the peer's output failed to load in ONNX Runtime; see JSON)")
    for name, model in results["models"].items():
        if "latency" not in model:
            continue
        lines.append(f"\n{name}: ORT CPU latency, 2 threads "
                     "(median ms; paired ratio vs ts:input:all)")
        for key, value in model["latency"].items():
            if value["error"]:
                lines.append(f"  {key:<28} FAILED: {value['error']}")
            else:
                lines.append(f"  {key:<28}{value['median_ms']:>9.1f} ms"
                             f"  x{value['paired_ratio']:.3f}"
                             f"  [{value['ratio_min']:.2f}, {value['ratio_max']:.2f}]")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CATALOGUE), help="comma-separated names")
    parser.add_argument("--latency-models", default=None,
                        help="models to time (default: the same as --models)")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", default=str(RESULTS / "optimize.json"))
    args = parser.parse_args()
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.models.split(",") if n]
    timed = names if args.latency_models is None else args.latency_models.split(",")
    results: dict = {"models": {}, "reps": args.reps, "runs": args.runs, "threads": 2}
    for name in names:
        print(f"[{name}] export and optimize")
        results["models"][name] = {graph: structure(name, graph) for graph in GRAPHS}
        if not args.no_latency and name in timed:
            print(f"[{name}] latency ({args.reps} reps x {args.runs} runs per process)")
            results["models"][name]["latency"] = latency(name, results["models"][name],
                                                         args.reps, args.runs)
        Path(args.json).write_text(json.dumps(results, indent=2, default=_plain))
    print(render(results))
    print(f"\nwrote {args.json}")


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value))


if __name__ == "__main__":
    main()
