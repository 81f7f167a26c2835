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
--emulate adds host_int8.qdq.onnx, the board's INT8 emulated on the host (a prediction until a
board confirms it), for verify on the same frames (gated at cosine 0.99 by default):
  edgefuse verify net.onnx net.int8/host_int8.qdq.onnx --inputs frames/ --per-layer --task detect
"""

from __future__ import annotations

import argparse
import shlex

from edgefuse import model_info
from edgefuse.cli._session_args import add_inputs_argument
from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import InputError, Ref
from edgefuse.quantize import DEFAULT_MIN_COSINE, DEFAULT_SAMPLES, quantize
from edgefuse.quantize.int8 import DEFAULT_INFER_SOC, write_int8_calibration
from edgefuse.quantize.int8_mixed import DEFAULT_MAX_DROP
from edgefuse.quantize.policy import render_policy
from edgefuse.reference.feeds import VIDEO_FRAMES
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
    parser.add_argument("--max-drop", type=float, metavar="POINTS",
                        help=f"with --int8: how far the INT8 task metric may fall below FP16's, "
                        f"in points (default {DEFAULT_MAX_DROP:g})")
    parser.add_argument("--emulate", action="store_true",
                        help="with --int8: also write host_int8.qdq.onnx, the host emulation of "
                        "the board's INT8 (ONNX Runtime QDQ), for verify --per-layer")
    parser.add_argument("--soc", help=f"with --int8: the chip ATC calibrates on (default "
                        f"{DEFAULT_INFER_SOC})")
    parser.add_argument("--keep-io-types", action="store_true",
                        help="keep float inputs and outputs FP32 (Casts at the boundary)")
    parser.add_argument("--keep-fp32", metavar="auto|none|NODE,OPTYPE,...",
                        help="auto: policy + overflow + search (default); none: policy only; "
                        "or node names / ONNX op types to keep FP32 (may include auto)")
    parser.add_argument("--min-cosine", type=float, metavar="C",
                        help=f"gate on every output (default {DEFAULT_MIN_COSINE})")
    add_inputs_argument(parser, "calibration inputs", images=True,
                        without="seeded random inputs (--fp16; --int8 refuses to calibrate on "
                                "noise: give real frames)")
    parser.add_argument("--seed", type=int, help="seed of random calibration inputs (default 0)")
    parser.add_argument("--samples", type=int,
                        help=f"random calibration samples (default {DEFAULT_SAMPLES})")
    parser.add_argument("--max-evaluations", type=int,
                        help="bound on the search's model evaluations (--keep-fp32 auto, "
                        "--keep-fp16 auto; default 40)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="bound on the search's time (--keep-fp32 auto, --keep-fp16 auto; "
                        "default 600)")
    parser.add_argument("--report", metavar="R.json", help="also write the report as JSON")
    parser.add_argument("--show-policy", action="store_true",
                        help="print the default keep-FP32 policy and exit")


# CANN's advice on the calibration set: batch_num * batch_size "建议为16或32" (16 or 32 images;
# "关于增加校准集的建议", CANNCommunityEdition/83RC1alpha003 appdevg/acldevg/aclcppdevg_000114)
ADVISED_SAMPLES = 16

# the options of one target only: given with the other, they would be ignored
FP16_ONLY = ("report", "keep_io_types", "keep_fp32", "min_cosine", "seed", "samples")
INT8_ONLY = ("keep_fp16", "task", "max_drop", "emulate", "soc")


def run(args: argparse.Namespace) -> int:
    if args.show_policy:
        print(render_policy())
        return 0
    if not args.model or not args.output:
        raise InputError("quantize needs an input model and -o OUTPUT",
                         hint="edgefuse quantize IN.onnx --int8 --inputs frames/ -o FOLDER"
                              if args.int8 else "edgefuse quantize IN.onnx -o OUT.onnx --fp16",
                         reference=Ref.BAD_USAGE)
    if args.fp16 == args.int8:
        raise InputError("choose the target precision: one of --fp16, --int8"
                         + (" (both were given)" if args.fp16 else ""),
                         hint="--fp16 writes an FP16 ONNX; --int8 writes ATC's INT8 calibration "
                              "folder" if args.fp16 else "pass --fp16 or --int8",
                         reference=Ref.NO_PRECISION)
    _refuse_other_targets_options(args, "--int8" if args.int8 else "--fp16",
                                  FP16_ONLY if args.int8 else INT8_ONLY)
    if args.int8:
        return _run_int8(args)
    given = {name: getattr(args, name) for name in ("keep_fp32", "min_cosine", "seed", "samples")
             if getattr(args, name) is not None}
    given.update(_search_bounds(args))
    result = quantize(
        args.model,
        output=args.output,
        keep_io_types=args.keep_io_types,
        inputs=args.inputs,
        report_path=args.report,
        preprocess=args.preprocess,
        **given,
    )
    print(result.report.render())
    print(f"\nwrote {args.output}" + (f" and {args.report}" if args.report else ""))
    return 0 if result.passed else 1


def _refuse_other_targets_options(args: argparse.Namespace, target: str,
                                  others: tuple[str, ...]) -> None:
    """An option of the other target is refused, not ignored: a user who gave it expects it to
    change the result."""
    given = ["--" + name.replace("_", "-") for name in others
             if _given(getattr(args, name))]
    if given:
        other = "--fp16" if target == "--int8" else "--int8"
        raise InputError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to "
                         f"{other} only, not to {target}",
                         hint=("--int8 writes its record in the output folder (int8.json); it "
                               f"calibrates on every image of --inputs (a video: {VIDEO_FRAMES} "
                               "frames spread over it)") if target == "--int8" else
                              "with --fp16 use --keep-fp32 to keep layers in float",
                         reference=Ref.BAD_USAGE)


def _given(value: object) -> bool:
    """Whether an option was on the command line: not its unset default (None, a flag's False,
    --keep-fp16's []); a value such as --seed 0 counts."""
    return value is not None and value is not False and value != []


def _run_int8(args: argparse.Namespace) -> int:
    written = write_int8_calibration(
        args.model, args.output, inputs=args.inputs, keep_fp16=_keep_fp16(args),
        infer_soc=args.soc or DEFAULT_INFER_SOC, preprocess=args.preprocess,
        emulate=args.emulate, task=args.task,
        max_drop=DEFAULT_MAX_DROP if args.max_drop is None else args.max_drop,
        **_search_bounds(args),
    )
    if written.mixed is not None:
        print(written.mixed.render())
    shapes = "; ".join(f"{i.name}: {list(i.shape)}" for i in written.inputs)
    kept = ", ".join(written.keep_fp16) or "none"
    print(f"INT8 calibration: {written.samples} sample(s) from {written.source} ({shapes}); "
          f"kept FP16: {kept}; calibrated on {written.infer_soc}")
    if written.samples < ADVISED_SAMPLES:
        print(f"note: {written.samples} calibration sample(s); CANN advises "
              f"{ADVISED_SAMPLES} or 32 images of the scene for post-training quantization "
              "(aclcppdevg_000114): with fewer, each activation range is set by what these "
              "frames happen to show")
    model, folder = shlex.quote(str(args.model)), shlex.quote(str(args.output))
    print(f"wrote {args.output}/ (compile it with: edgefuse compile {model} "
          f"--soc {written.infer_soc} -o BUILD --int8 {folder})")
    if written.emulated is not None:
        # judged on the frames it was calibrated on: on noise, activations fall outside the
        # calibrated ranges and the comparison says nothing about the camera
        feeds = f" --inputs {shlex.quote(str(args.inputs))}" + (
            f" --preprocess {shlex.quote(str(args.preprocess))}" if args.preprocess else "")
        emulated = shlex.quote(f"{args.output}/{written.emulated}")
        print(f"host emulation of INT8 (a prediction until a board confirms it): edgefuse verify "
              f"{model} {emulated}{feeds} --per-layer")
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


def _search_bounds(args: argparse.Namespace) -> dict[str, float]:
    """--max-evaluations and --budget where given: both searches (keep-FP32, keep-FP16) take
    them, each with its own defaults otherwise."""
    bounds: dict[str, float] = {}
    if args.max_evaluations is not None:
        bounds["max_evaluations"] = args.max_evaluations
    if args.budget is not None:
        bounds["budget_s"] = args.budget
    return bounds
