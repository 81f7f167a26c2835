"""Measure one configuration's latency in a fresh process and print it as JSON.

Why a process per measurement: on a shared 2-core machine, sessions created in one process were
biased by up to 30% by load order and spinning thread pools; a fresh process per configuration,
interleaved with the others, removes that bias (see bench/_harness.py).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from edgefuse.models import get_entry


def _ort_runner(path: str, level: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([int(d) for d in i.shape]).astype(np.float32)
        for i in session.get_inputs()
    }
    return lambda: session.run(None, feeds)


def _torch_runner(model_name: str, threads: int):
    import torch

    torch.set_num_threads(threads)
    entry = get_entry(model_name)
    module = entry.build("full")
    example = torch.randn(*entry.input_shape, generator=torch.Generator().manual_seed(0))

    def run():
        with torch.no_grad():
            module(example)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--onnx")
    parser.add_argument("--level", default="all", choices=("disable", "all"))
    parser.add_argument("--torch-model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if args.onnx:
        run = _ort_runner(args.onnx, args.level, args.threads)
    else:
        run = _torch_runner(args.torch_model, args.threads)
    for _ in range(args.warmup):
        run()
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"median_ms": float(np.median(times)),
                      "p90_ms": float(np.percentile(times, 90)), "runs": args.runs}))


if __name__ == "__main__":
    main()
