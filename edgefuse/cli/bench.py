"""Measure latency (p50/p90/p99) and throughput, side by side with raw ONNX Runtime and, given a
PyTorch source, PyTorch eager; or, with --source, the whole frame path on real frames.

Runners are warmed up, then take turns in rounds in one process. A progress bar shows on a
terminal. With --source, frames of a video file or stream go through decode (--decode dvpp|cpu|
auto, as the apps decide it), preprocess, infer and postprocess one after another; each stage's
time, the frame rate and the process CPU time per frame are reported (CPU time over wall time:
how many cores the frame path keeps busy).

Examples:
  edgefuse bench model.onnx --iterations 200 --json bench.json
  edgefuse bench build/ --backend acl --seconds 30
  edgefuse bench resnet50.onnx --backend cpu --torch resnet50
  edgefuse bench model.onnx --backend cpu --profile --soc Ascend310B4
  edgefuse bench build/ --backend acl --source camera.mp4 --decode dvpp --iterations 300
  edgefuse bench build/ --backend sim --source rtsp://10.0.0.5/stream --decode dvpp --seconds 30
"""

from __future__ import annotations

import argparse
import json
import sys

from edgefuse._files import check_output_path, check_outputs_spare_inputs, write_text
from edgefuse.benchmark import DEFAULT_WARMUP, bench
from edgefuse.cli._session_args import (
    add_inputs_argument,
    add_session_arguments,
    backends_from,
    session_options,
)
from edgefuse.cli.profile import profile_model
from edgefuse.errors import InputError, Ref
from edgefuse.profile.run import DEFAULT_RUNS
from edgefuse.profile.socs import soc_peaks
from edgefuse.vision.frame_bench import DEFAULT_SOURCE_WARMUP, bench_source
from edgefuse.vision.streams.dvpp_source import DECODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_session_arguments(parser)
    add_inputs_argument(parser, "inputs to time on", images=True, preprocess=False)
    parser.add_argument("--batch", type=int, metavar="N", help="batch size of the inputs")
    parser.add_argument("--warmup", type=int, metavar="N",
                        help=f"untimed runs per runner first (default {DEFAULT_WARMUP}; with "
                        f"--source, frames: {DEFAULT_SOURCE_WARMUP}, at most half of a folder "
                        "of images)")
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
    parser.add_argument("--profile", action="store_true",
                        help="then profile the model on the backend bench used (`edgefuse "
                             "profile`: per node and op type) and set its total against bench's "
                             "median")
    parser.add_argument("--soc", metavar="SOC",
                        help="with --profile: add the board's floor on this SoC (a lower bound)")
    parser.add_argument("--source", metavar="FILE|URL",
                        help="time the whole frame path (decode, preprocess, infer, postprocess) "
                             "on the frames of this video file or stream (--iterations: frames "
                             "timed, default 100 or the whole file; --warmup: frames not timed)")
    parser.add_argument("--decode", choices=DECODES, default=None,
                        help="with --source: decode on DVPP (the board's media units; their "
                             "emulation on sim), on the CPU, or auto (DVPP where it can be; the "
                             "default)")


def run(args: argparse.Namespace) -> int:
    if args.json:
        check_output_path(args.json)  # a report that cannot be written fails before the timing
    if args.source is not None:
        return _run_source(args)
    if args.decode is not None:
        raise InputError("--decode is for the frame path: give it with --source FILE|URL",
                         reference=Ref.BAD_USAGE)
    if args.soc and not args.profile:
        raise InputError("--soc is for the profile's floor: give it with --profile",
                         reference=Ref.BAD_USAGE)
    peaks = soc_peaks(args.soc) if args.soc else None  # a typo fails before minutes of timing
    check_outputs_spare_inputs(
        {"--json report": args.json},
        {"model": args.model, "inputs": args.inputs, "torch model": args.torch})
    report = bench(
        args.model,
        backends_from(args),
        strict=args.strict,
        batch=args.batch,
        inputs=args.inputs,
        warmup=DEFAULT_WARMUP if args.warmup is None else args.warmup,
        iterations=args.iterations,
        seconds=args.seconds,
        compare_onnxruntime=not args.no_onnxruntime,
        torch_model=args.torch,
        progress=not args.no_progress and sys.stderr.isatty(),
        **session_options(args),
    )
    print(report.render())
    document = report.to_json()
    if args.profile:
        document["profile"] = _profile(args, report, peaks)
    if args.json:
        write_text(args.json, json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _run_source(args: argparse.Namespace) -> int:
    """``--source``: the frame path on real frames (edgefuse.vision.frame_bench)."""
    tensor_only = [flag for flag, given in (("--inputs", args.inputs), ("--batch", args.batch),
                                            ("--torch", args.torch), ("--profile", args.profile),
                                            ("--soc", args.soc),
                                            ("--no-onnxruntime", args.no_onnxruntime))
                   if given]
    if tensor_only:
        raise InputError(f"{', '.join(tensor_only)} {'is' if len(tensor_only) == 1 else 'are'} "
                         "for timing the model on tensors; --source times the frame path on the "
                         "source's frames", hint="leave out one or the other",
                         reference=Ref.BAD_USAGE)
    check_outputs_spare_inputs({"--json report": args.json},
                               {"model": args.model, "source": args.source})
    report = bench_source(
        args.model, args.source, backends_from(args), strict=args.strict,
        decode=args.decode or "auto", frames=args.iterations, seconds=args.seconds,
        warmup=args.warmup, session_options=session_options(args))
    print(report.render())
    if args.json:
        write_text(args.json, json.dumps(report.to_json(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _profile(args: argparse.Namespace, report, peaks) -> dict:
    """Profile on the backend bench ran on, and set the profile's total against bench's p50."""
    profiled = profile_model(args, args.model, report.backend,
                             runs=args.iterations or DEFAULT_RUNS, peaks=peaks)
    print()
    print(profiled.render())
    median = report.results[f"edgefuse/{report.backend}"].p50_ms
    print(f"\nprofile vs bench: kernels {profiled.total_us / 1e3:.3f} ms, whole run "
          f"{profiled.wall_us / 1e3:.3f} ms; bench p50 {median:.3f} ms "
          f"(whole run {100 * (profiled.wall_us / 1e3 / median - 1):+.1f}%)")
    return {**profiled.to_json(), "bench_p50_ms": median}
