"""Show where a model's time goes: per node and per op type, with FLOPs, bytes, rates, what each
node of an optimized model came from, and the board's floor (a lower bound) on a SoC.

Host backends run under ONNX Runtime's own profiler; ``--backend acl`` runs the BUILD_DIR on the
board under CANN's msprof. ``--compare OTHER`` profiles a second model the same way and shows
time per op type side by side and the time each optimize rule saved.

Examples:
  edgefuse profile model.onnx --soc Ascend310B4 --trace trace.json
  edgefuse profile model.onnx --compare model.opt.onnx --runs 30
  edgefuse profile build/ --backend acl --soc Ascend310B4
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from edgefuse._files import check_distinct_outputs, write_text
from edgefuse.cli._session_args import add_inputs_argument
from edgefuse.profile.board import profile_on_board
from edgefuse.profile.chrome_trace import write_trace
from edgefuse.profile.compare import compare
from edgefuse.profile.roofline import PRECISION_BYTES
from edgefuse.profile.run import DEFAULT_RUNS, DEFAULT_WARMUP, HOST_BACKENDS, profile
from edgefuse.profile.socs import SOC_PEAKS, soc_peaks
from edgefuse.profile.table import ProfileReport


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL|BUILD_DIR",
                        help="an .onnx file, or a directory from `edgefuse compile`")
    parser.add_argument("--backend", choices=PROFILED_BACKENDS, default="cpu",
                        help="where to profile (one; default cpu): ONNX Runtime's profiler on "
                             "cpu, cuda, tensorrt or sim (a BUILD_DIR under the board's "
                             "contract), CANN's msprof on acl (the board)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="ONNX Runtime intra-op threads (default: ONNX Runtime's choice)")
    parser.add_argument("--device-id", type=int, default=0, metavar="N",
                        help="NPU or GPU to use (default 0)")
    parser.add_argument("--sim-soc", metavar="SOC", help="sim backend: the soc to simulate")
    parser.add_argument("--sim-memory", metavar="SIZE",
                        help="sim backend: the board's memory, in bytes or e.g. 4GiB")
    add_inputs_argument(parser, "inputs to profile on")
    parser.add_argument("--batch", type=int, metavar="N", help="batch size of random inputs")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N",
                        help=f"timed runs; each node's time is their median (default "
                             f"{DEFAULT_RUNS})")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, metavar="N",
                        help=f"untimed runs first (default {DEFAULT_WARMUP})")
    parser.add_argument("--soc", metavar="SOC",
                        help="add the board's floor on this SoC, a lower bound from its "
                             f"published peaks (SoCs with figures: {', '.join(SOC_PEAKS)})")
    parser.add_argument("--precision", choices=tuple(PRECISION_BYTES), default="fp16",
                        help="the precision the board runs at, for the floor (default fp16); "
                        "int8: Conv/Gemm/MatMul at the INT8 peak, the rest at the FP16 peak")
    parser.add_argument("--keep-fp16", nargs="+", default=[], metavar="LAYER",
                        help="with --precision int8: the layers quantize --int8 kept FP16 "
                        "(their floor uses the FP16 peak)")
    parser.add_argument("--compare", metavar="OTHER",
                        help="a second model (e.g. after `edgefuse optimize`) to profile and "
                             "set side by side, with the time each optimize rule saved")
    parser.add_argument("--trace", metavar="OUT.json",
                        help="write a Chrome trace-event file (chrome://tracing, Perfetto)")
    parser.add_argument("--json", metavar="OUT.json", help="write the table(s) as JSON")
    parser.add_argument("--top", type=int, default=25, metavar="N",
                        help="nodes to list, slowest first (0: all; default 25)")


PROFILED_BACKENDS = (*HOST_BACKENDS, "acl")


def run(args: argparse.Namespace) -> int:
    backend = args.backend
    check_distinct_outputs(trace=args.trace, json=args.json)  # before minutes of profiling
    peaks = soc_peaks(args.soc) if args.soc else None
    reports = [_profile(args, model, backend, peaks)
               for model in (args.model, *([args.compare] if args.compare else []))]
    top = None if args.top == 0 else args.top
    for report in reports:
        print(report.render(top=top))
        print()
    document: dict = {"profiles": [report.to_json() for report in reports]}
    if len(reports) == 2:
        comparison = compare(*reports)
        print(comparison.render())
        document["comparison"] = comparison.to_json()
    if args.trace:
        write_trace(args.trace, reports)
        print(f"wrote {args.trace}")
    if args.json:
        write_text(args.json, json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _profile(args: argparse.Namespace, model: str, backend: str, peaks):
    return profile_model(args, model, backend, runs=args.runs, peaks=peaks,
                         precision=args.precision, keep_fp16=args.keep_fp16)


def profile_model(args: argparse.Namespace, model: str, backend: str, *, runs: int, peaks,
                  precision: str = "fp16", keep_fp16: Sequence[str] = ()) -> ProfileReport:
    """Profile ``model`` on ``backend`` with the session arguments of ``args`` (shared with
    ``bench --profile``)."""
    if backend == "acl":
        return profile_on_board(model, runs=runs, warmup=args.warmup, peaks=peaks,
                                inputs=args.inputs, device_id=args.device_id)
    options: dict[str, object] = {}
    if args.threads is not None:
        options["threads"] = args.threads
    if backend in ("cuda", "tensorrt"):
        options["device_id"] = args.device_id
    if backend == "sim":
        options.update({k: v for k, v in (("soc", args.sim_soc), ("memory", args.sim_memory))
                        if v is not None})
    return profile(model, backend, inputs=args.inputs, batch=args.batch, runs=runs,
                   warmup=args.warmup, soc=peaks.soc if peaks else None, precision=precision,
                   keep_fp16=keep_fp16, **options)
