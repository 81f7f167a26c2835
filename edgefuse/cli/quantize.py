"""FP16 with FP32 kept only where the accuracy gate needs it, or ATC's INT8 calibration (--int8).

With --fp16: folds in FP32 first (the optimize pipeline), keeps the documented policy's nodes in
FP32 (--show-policy), and with --keep-fp32 auto searches for the few more nodes that every output
needs to stay at cosine >= --min-cosine against the FP32 model, measured on the host with FP16
storage emulated. Exits 1 when no keep-FP32 set meets the gate (the model and report are still
written, with the best cosine reached).

Examples:
  edgefuse quantize net.onnx -o net.fp16.onnx --fp16 --report fp16.json
  edgefuse quantize net.onnx -o net.fp16.onnx --fp16 --keep-io-types --keep-fp32 auto,Softmax
  edgefuse compile net.fp16.onnx --soc Ascend310B4 -o build --keep-fp32-from fp16.json

With --int8, -o is a folder: the calibration data (from --inputs, real frames: never noise), the
simple quantization config (--keep-fp16 layers left unquantized) and ATC's compression config,
for `compile --int8 FOLDER` (INT8 calibration happens inside ATC, on the FP32 model). As --fp16
keeps FP32 layers automatically, --int8 keeps FP16 layers automatically (--keep-fp16 auto, the
default when the task is known from --task or the model's app info): each layer's INT8 sensitivity
is measured on the host emulation (IFMR ranges, as CANN calibrates), and the most sensitive stay
FP16 until the task metric (top-1 / AP50 / mIoU against FP32's decisions) is within --max-drop
points of FP16's; int8_report.json says what each kept layer buys. The INT8 figures are host
predictions until a board confirms them (run --record on the board, verify --against):
  edgefuse quantize net.onnx --int8 --inputs frames/ -o net.int8 --task detect
  edgefuse quantize net.onnx --int8 --inputs frames/ -o net.int8 --keep-fp16 /model.0/conv/Conv
  edgefuse compile net.onnx --soc Ascend310B4 -o build --int8 net.int8
"""

from __future__ import annotations

import argparse

from edgefuse import model_info
from edgefuse.cli._session_args import add_inputs_argument
from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import InputError, Ref
from edgefuse.quantize import DEFAULT_MIN_COSINE, DEFAULT_SAMPLES, quantize
from edgefuse.quantize.int8 import DEFAULT_INFER_SOC, write_int8_calibration
from edgefuse.quantize.int8_mixed import DEFAULT_MAX_DROP
from edgefuse.quantize.policy import render_policy
from edgefuse.verify.task import TASKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="input FP32 ONNX file")
    parser.add_argument("-o", "--output",
                        help="where to write the FP16 ONNX (--int8: the calibration folder)")
    parser.add_argument("--fp16", action="store_true",
                        help="convert to FP16 on the host (the board runs the FP16 ONNX's OM)")
    parser.add_argument("--int8", action="store_true",
                        help="write the INT8 calibration folder ATC quantizes with (-o: a folder)")
    parser.add_argument("--keep-fp16", nargs="+", metavar="auto|none|LAYER",
                        help="with --int8: auto (measured sensitivity, the default when the task "
                        "is known), none, or ONNX node names of Conv/Gemm/MatMul layers to leave "
                        "unquantized, FP16 on the board (names may be combined with auto)")
    parser.add_argument("--task", choices=TASKS,
                        help="with --int8: the task whose metric gates --keep-fp16 auto "
                        "(default: the model's app info)")
    parser.add_argument("--max-drop", type=float, default=DEFAULT_MAX_DROP, metavar="POINTS",
                        help=f"with --int8: how far the INT8 task metric may fall below FP16's, "
                        f"in points (default {DEFAULT_MAX_DROP:g})")
    parser.add_argument("--emulate", action="store_true",
                        help="with --int8: also write host_int8.qdq.onnx, the host emulation of "
                        "the board's INT8 (ONNX Runtime QDQ), for verify --per-layer")
    parser.add_argument("--soc", default=DEFAULT_INFER_SOC,
                        help=f"with --int8: the chip ATC calibrates on (default "
                        f"{DEFAULT_INFER_SOC})")
    parser.add_argument("--keep-io-types", action="store_true",
                        help="keep float inputs and outputs FP32 (Casts at the boundary)")
    parser.add_argument("--keep-fp32", default="auto", metavar="auto|none|NODE,OPTYPE,...",
                        help="auto: policy + overflow + search (default); none: policy only; "
                        "or node names / ONNX op types to keep FP32 (may include auto)")
    parser.add_argument("--min-cosine", type=float, default=DEFAULT_MIN_COSINE, metavar="C",
                        help=f"gate on every output (default {DEFAULT_MIN_COSINE})")
    add_inputs_argument(parser, "calibration inputs", images=True)
    parser.add_argument("--seed", type=int, default=0, help="seed of random calibration inputs")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                        help=f"random calibration samples (default {DEFAULT_SAMPLES})")
    parser.add_argument("--max-evaluations", type=int, default=40,
                        help="bound on the search's model evaluations")
    parser.add_argument("--budget", type=float, default=600.0, metavar="SECONDS",
                        help="bound on the search's time")
    parser.add_argument("--report", metavar="R.json", help="also write the report as JSON")
    parser.add_argument("--show-policy", action="store_true",
                        help="print the default keep-FP32 policy and exit")


def run(args: argparse.Namespace) -> int:
    if args.show_policy:
        print(render_policy())
        return 0
    if not args.model or not args.output:
        raise InputError("quantize needs an input model and -o OUTPUT",
                         hint="edgefuse quantize IN.onnx -o OUT.onnx --fp16",
                         reference=Ref.BAD_USAGE)
    if args.fp16 == args.int8:
        raise InputError("choose the target precision: one of --fp16, --int8",
                         hint="pass --fp16 or --int8",
                         reference=Ref.NO_PRECISION)
    if args.int8:
        return _run_int8(args)
    if args.keep_fp16 is not None or args.task is not None:
        raise InputError("--keep-fp16 and --task apply to --int8",
                         hint="with --fp16 use --keep-fp32", reference=Ref.BAD_USAGE)
    result = quantize(
        args.model,
        output=args.output,
        keep_io_types=args.keep_io_types,
        keep_fp32=args.keep_fp32,
        min_cosine=args.min_cosine,
        inputs=args.inputs,
        seed=args.seed,
        samples=args.samples,
        report_path=args.report,
        max_evaluations=args.max_evaluations,
        budget_s=args.budget,
        preprocess=args.preprocess,
    )
    print(result.report.render())
    print(f"\nwrote {args.output}" + (f" and {args.report}" if args.report else ""))
    return 0 if result.passed else 1


def _run_int8(args: argparse.Namespace) -> int:
    fp16_only = [flag for flag, given in (("--report", args.report),
                                          ("--keep-io-types", args.keep_io_types)) if given]
    if fp16_only:
        raise InputError(f"{', '.join(fp16_only)} appl{'ies' if len(fp16_only) == 1 else 'y'} "
                         "to --fp16 only",
                         hint="--int8 writes its record in the output folder (int8.json)",
                         reference=Ref.BAD_USAGE)
    keep = _keep_fp16(args)
    written = write_int8_calibration(
        args.model, args.output, inputs=args.inputs, keep_fp16=keep,
        infer_soc=args.soc, preprocess=args.preprocess, emulate=args.emulate, task=args.task,
        max_drop=args.max_drop, max_evaluations=args.max_evaluations, budget_s=args.budget,
    )
    if written.mixed is not None:
        print(written.mixed.render())
    shapes = "; ".join(f"{i.name}: {list(i.shape)}" for i in written.inputs)
    kept = ", ".join(written.keep_fp16) or "none"
    print(f"INT8 calibration: {written.samples} sample(s) from {written.source} ({shapes}); "
          f"kept FP16: {kept}; calibrated on {written.infer_soc}")
    print(f"wrote {args.output}/ (compile it with: edgefuse compile {args.model} "
          f"--soc {written.infer_soc} -o BUILD --int8 {args.output})")
    if written.emulated is not None:
        print(f"host emulation of INT8 (a prediction until a board confirms it): edgefuse verify "
              f"{args.model} {args.output}/{written.emulated} --per-layer")
    return 1 if written.mixed is not None and not written.mixed.passed else 0


def _keep_fp16(args: argparse.Namespace) -> list[str]:
    """--keep-fp16 as given; by default auto when the task is known, else none (said aloud)."""
    if args.keep_fp16 is not None:
        return args.keep_fp16
    if args.task is None:
        info = model_info.from_onnx(load_model(args.model), args.model)
        if info is None or info.task is None:
            print("no task known (--task, or the model's app info): no layers kept FP16 "
                  "automatically; pass --task to choose them by measured accuracy")
            return []
    return ["auto"]
