"""Measure latency (p50/p90/p99) and throughput, side by side with raw ONNX Runtime and, given a
PyTorch source, PyTorch eager.

Runners are warmed up, then take turns in rounds in one process. A progress bar shows on a
terminal.

Examples:
  edgefuse bench model.onnx --iterations 200 --json bench.json
  edgefuse bench build/ --backend acl --seconds 30
  edgefuse bench resnet50.onnx --backend cpu --torch resnet50
"""

from __future__ import annotations

import argparse
import json
import sys

from edgefuse._files import check_outputs_spare_inputs, write_text
from edgefuse.benchmark import bench
from edgefuse.cli._session_args import (
    add_inputs_argument,
    add_session_arguments,
    backends_from,
    session_options,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_session_arguments(parser)
    add_inputs_argument(parser, "inputs to time on")
    parser.add_argument("--batch", type=int, metavar="N", help="batch size of the inputs")
    parser.add_argument("--warmup", type=int, default=10, metavar="N",
                        help="untimed runs per runner first (default 10)")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--iterations", type=int, metavar="N",
                        help="timed runs per runner (default 100)")
    amount.add_argument("--seconds", type=float, metavar="S", help="time budget per runner")
    parser.add_argument("--torch", metavar="NAME|FILE",
                        help="PyTorch source to compare with: a catalogue model name "
                             "(edgefuse.models), a torch.export .pt2 file or a TorchScript file")
    parser.add_argument("--no-onnxruntime", action="store_true",
                        help="do not compare with raw ONNX Runtime")
    parser.add_argument("--json", metavar="R.json", help="also write the results as JSON")
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def run(args: argparse.Namespace) -> int:
    check_outputs_spare_inputs(
        {"--json report": args.json},
        {"model": args.model, "inputs": args.inputs, "torch model": args.torch})
    report = bench(
        args.model,
        backends_from(args),
        strict=args.strict,
        batch=args.batch,
        inputs=args.inputs,
        warmup=args.warmup,
        iterations=args.iterations,
        seconds=args.seconds,
        compare_onnxruntime=not args.no_onnxruntime,
        torch_model=args.torch,
        progress=not args.no_progress and sys.stderr.isatty(),
        **session_options(args),
    )
    print(report.render())
    if args.json:
        write_text(args.json, json.dumps(report.to_json(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
