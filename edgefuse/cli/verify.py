"""Compare a candidate model with a reference on the same inputs (exit 1 when a gate fails).

Runs both on ONNX Runtime CPU with graph optimizations off, on seeded random inputs that fit the
reference's input spec or on --inputs FILE.npz|DIR, and reports per output the cosine similarity,
the max absolute error and the relative L2 error. A candidate holding FP16 tensors runs with FP16
storage emulated (every FP16 tensor rounded, as on the board); --emulate-fp16 does the same to an
FP32 candidate (ATC's default force_fp16).

--per-layer compares every intermediate tensor both models share, accumulated and isolated, in
graph order, with the worst layers marked; --task scores the candidate's decisions against the
reference's (top-1/top-5 agreement, AP50 and AP50:95, mean IoU).

--against OUT.npz MODEL|BUILD_DIR instead runs the inputs of a recording (`edgefuse run --record`,
or a bundle's models/<name>/golden.npz: the same format) on the model, opened on --backend as
`run` opens it, and gates its outputs against the recorded ones: cosine >= 0.999 when the
recording or the backend has the board's FP16 numerics (acl, sim, or FP16 outputs), 0.99999
otherwise.

Examples:
  edgefuse verify net.onnx net.fp16.onnx --per-layer --json layers.json --plot layers.png
  edgefuse verify yolo.onnx yolo.fp16.onnx --task detect --samples 4
  edgefuse verify net.onnx net.onnx --emulate-fp16 --per-layer
  edgefuse verify --against golden.npz build/ --backend acl     # on the board, host goldens
  edgefuse verify --against board.npz build/ --backend sim      # on a laptop, board goldens
  edgefuse verify --against models/det/golden.npz models/det    # a bundle's golden
"""

from __future__ import annotations

import argparse
import json

from edgefuse._checks import non_negative_number, number_in
from edgefuse._files import check_output_path, check_outputs_spare_inputs, write_text
from edgefuse.cli._session_args import (
    add_backend_arguments,
    add_inputs_argument,
    backends_from,
    session_options,
)
from edgefuse.errors import InputError, Ref
from edgefuse.goldens import check_against
from edgefuse.verify import (
    DEFAULT_FP16_MIN_COSINE,
    DEFAULT_INT8_MIN_COSINE,
    DEFAULT_MIN_COSINE,
    verify,
)
from edgefuse.verify.layers import DEFAULT_LAYER_ALARM
from edgefuse.verify.task import DEFAULT_GT_CONF, DEFAULT_MIN_SCORE, TASKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", metavar="REFERENCE|MODEL",
                        help="reference ONNX file; with --against, the model or BUILD_DIR to run")
    parser.add_argument("candidate", nargs="?", help="candidate ONNX file (not with --against)")
    parser.add_argument("--against", metavar="OUT.npz",
                        help="a recording (`edgefuse run --record`): run its inputs on MODEL and "
                             "gate on its outputs")
    add_backend_arguments(parser)
    add_inputs_argument(parser, "inputs", images=True)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--samples", type=int, default=1, help="random input samples")
    parser.add_argument("--min-cosine", type=float, default=None, metavar="C",
                        help=f"output gate (default {DEFAULT_MIN_COSINE}; "
                        f"{DEFAULT_FP16_MIN_COSINE} when the candidate runs with FP16 storage; "
                        f"{DEFAULT_INT8_MIN_COSINE} when it quantizes activations, as "
                        "`quantize --int8 --emulate`'s host_int8.qdq.onnx does)")
    parser.add_argument("--max-rel-l2", type=float, default=None, metavar="E")
    parser.add_argument("--json", metavar="R.json", help="also write the result as JSON")
    emulation = parser.add_mutually_exclusive_group()
    emulation.add_argument("--emulate-fp16", dest="emulate_fp16", action="store_true",
                           default=None, help="emulate FP16 storage in an FP32 candidate too")
    emulation.add_argument("--no-emulate", dest="emulate_fp16", action="store_false",
                           help="run the candidate as written, even if it holds FP16")
    parser.add_argument("--per-layer", action="store_true",
                        help="compare every shared intermediate tensor (first sample)")
    parser.add_argument("--layer-alarm", type=float, default=DEFAULT_LAYER_ALARM, metavar="C",
                        help=f"flag layers below this cosine (default {DEFAULT_LAYER_ALARM})")
    parser.add_argument("--plot", metavar="R.png",
                        help="per-layer plot (needs the 'plot' extra: matplotlib)")
    parser.add_argument("--task", choices=TASKS, help="also score task-level parity")
    parser.add_argument("--min-task-score", type=float, default=DEFAULT_MIN_SCORE, metavar="S",
                        help="gate on top-1 agreement, AP50 or mean IoU "
                        f"(default {DEFAULT_MIN_SCORE})")
    parser.add_argument("--gt-conf", type=float, default=DEFAULT_GT_CONF, metavar="T",
                        help="detect: reference boxes above this score are the ground truth "
                        f"(default {DEFAULT_GT_CONF})")


def run(args: argparse.Namespace) -> int:
    if args.against:
        return _run_against(args)
    if args.candidate is None:
        raise InputError("verify needs a reference and a candidate model",
                         hint="or --against OUT.npz MODEL to check a model against a recording",
                         reference=Ref.BAD_ARGUMENT)
    if args.backend:
        raise InputError("--backend applies to --against (verify runs both models on ONNX "
                         "Runtime's CPU)", reference=Ref.BAD_ARGUMENT)
    result = verify(
        args.reference,
        args.candidate,
        inputs=args.inputs,
        seed=args.seed,
        samples=args.samples,
        min_cosine=args.min_cosine,
        max_rel_l2=args.max_rel_l2,
        json_path=args.json,
        emulate_fp16=args.emulate_fp16,
        per_layer=args.per_layer,
        alarm_cosine=args.layer_alarm,
        plot_path=args.plot,
        task=args.task,
        min_task_score=args.min_task_score,
        gt_conf=args.gt_conf,
        preprocess=args.preprocess,
    )
    print(result.render())
    return 0 if result.passed else 1


def _run_against(args: argparse.Namespace) -> int:
    if args.candidate is not None:
        raise InputError("--against takes one model (the recording is the reference), got two",
                         hint="edgefuse verify --against OUT.npz MODEL_OR_BUILD --backend B",
                         reference=Ref.BAD_ARGUMENT)
    if args.min_cosine is not None:
        number_in("min_cosine", args.min_cosine, -1.0, 1.0)
    if args.max_rel_l2 is not None:
        non_negative_number("max_rel_l2", args.max_rel_l2)
    if args.json:
        check_output_path(args.json)
    check_outputs_spare_inputs({"--json report": args.json},
                               {"recording": args.against, "model": args.reference})
    result = check_against(args.against, args.reference, backends_from(args), strict=args.strict,
                           min_cosine=args.min_cosine, max_rel_l2=args.max_rel_l2,
                           **session_options(args))
    print(result.render())
    if args.json:
        write_text(args.json, json.dumps(result.to_json(), indent=2) + "\n")
    return 0 if result.passed else 1
