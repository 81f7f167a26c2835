"""Compile an ONNX model for an Ascend SoC into a build directory (and an OM when ATC is here).

Writes BUILD_DIR with the prepared ONNX, compile.sh (the exact ATC command), aipp.cfg /
keep_dtype.cfg when asked for, the op-support report and manifest.json. When `atc` is on PATH
(after sourcing CANN's set_env.sh) it runs it and adds model.om and atc.log; otherwise it prints
how to run compile.sh on a CANN host and exits 0 (exit 2 with --require-atc).

A model from `optimize --target <Ascend soc>` may carry edgefuse custom ops (Swish, ...): ATC
parses them only with edgefuse's op package installed (`edgefuse ops build`), so the manifest
records the dependency and the build checks for the package before ATC (exit 2 when it is
missing). --no-custom-ops decomposes them into standard ONNX ops instead (no package needed).

Examples:
  edgefuse compile resnet18.onnx --soc Ascend310B4 -o build/resnet18
  edgefuse compile yolo.onnx --soc Ascend310B4 -o build/yolo --aipp camera.yaml --dynamic-batch 1,4
  edgefuse compile net.onnx --soc Ascend310B4 -o build/net --keep-fp32-from fp16_report.json
  edgefuse compile net.onnx --soc Ascend310B4 -o build/net --int8 net.int8  (quantize --int8)
"""

from __future__ import annotations

import argparse
import logging

from edgefuse._files import check_outputs_spare_inputs
from edgefuse.acl.atc.options import OUTPUT_TYPES, PRECISION_MODES
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import (
    DEFAULT_ATC_TIMEOUT_S,
    compile_model,
    custom_ops_text,
    run_instructions,
)
from edgefuse.acl.compile.precision import NOTHING_KEPT, read_keep_fp32
from edgefuse.acl.compile.prepare import DEFAULT_TARGET_OPSET
from edgefuse.acl.compile.soc import KNOWN_SOCS
from edgefuse.quantize.int8 import read_int8_calibration

logger = logging.getLogger("edgefuse.atc")


def _gears(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        message = f"expected comma-separated integers, got '{text}'"
        raise argparse.ArgumentTypeError(message) from exc


def _image_gears(text: str) -> list[tuple[int, int]]:
    gears = []
    for gear in text.split(";"):
        parts = gear.split(",")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise argparse.ArgumentTypeError(f"expected 'H,W;H,W;...', got '{text}'")
        gears.append((int(parts[0]), int(parts[1])))
    return gears


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="input ONNX file (FP32, ideally from `edgefuse convert`)")
    parser.add_argument(
        "--soc",
        help="ATC --soc_version, e.g. Ascend310B4 (default: detect with `npu-smi info`); "
        f"known: {', '.join(KNOWN_SOCS)}",
    )
    parser.add_argument("-o", "--output", required=True, metavar="BUILD_DIR",
                        help="build directory to create")
    parser.add_argument("--precision", default="force_fp16", choices=PRECISION_MODES,
                        help="ATC --precision_mode (default: force_fp16, ATC's own default)")
    parser.add_argument("--output-type", choices=tuple(OUTPUT_TYPES),
                        help="ATC --output_type: the dtype of every (float) output of the OM "
                        "(default: the model's own, float32 for an FP32 model)")
    parser.add_argument("--keep-fp32-from", metavar="R.json",
                        help='precision report with {"keep_fp32": {"nodes": [...], '
                        '"op_types": [...]}}: those stay fp32 (--keep_dtype / mix list)')
    parser.add_argument("--int8", metavar="FOLDER",
                        help="quantize to INT8 in ATC with this `quantize --int8` calibration "
                        "folder (--compression_optimize_conf)")
    parser.add_argument("--aipp", metavar="SPEC.yaml",
                        help="preprocessing spec: board-side AIPP (aipp.cfg) from uint8 frames; "
                        "YAML keys input_format and source_size (required), crop, model_color, "
                        "mean, std or scale, csc, input (docs/sim.md, \"DVPP\")")
    gears = parser.add_mutually_exclusive_group()
    gears.add_argument("--dynamic-batch", type=_gears, metavar="1,2,4",
                       help="compile batch-size gears (ATC --dynamic_batch_size)")
    gears.add_argument("--dynamic-image-size", type=_image_gears, metavar="H,W;H,W",
                       help="compile image-size gears (ATC --dynamic_image_size)")
    parser.add_argument("--opset", type=int, default=DEFAULT_TARGET_OPSET,
                        help="lowest opset to prepare the ONNX at "
                        f"(default {DEFAULT_TARGET_OPSET})")
    parser.add_argument("--require-atc", action="store_true",
                        help="fail (exit 2, nothing written) when atc is not on PATH")
    parser.add_argument("--atc-timeout", type=float, default=DEFAULT_ATC_TIMEOUT_S, metavar="S",
                        help=f"stop ATC after S seconds (default {DEFAULT_ATC_TIMEOUT_S:g})")
    parser.add_argument("--no-custom-ops", dest="custom_ops", action="store_false",
                        help="decompose edgefuse custom ops (Swish, ...) into standard ONNX ops, "
                        "so that ATC needs no edgefuse op package")
    parser.add_argument("--force", action="store_true", help="replace an existing BUILD_DIR")


def run(args: argparse.Namespace) -> int:
    check_outputs_spare_inputs(
        {"BUILD_DIR": args.output},
        {"model": args.model, "AIPP spec": args.aipp, "precision report": args.keep_fp32_from,
         "INT8 calibration folder": args.int8})
    keep = read_keep_fp32(args.keep_fp32_from) if args.keep_fp32_from else NOTHING_KEPT
    result = compile_model(
        args.model,
        args.soc,
        args.output,
        precision=args.precision,
        output_type=args.output_type,
        aipp=AippSpec.from_yaml(args.aipp) if args.aipp else None,
        dynamic_batch=args.dynamic_batch,
        dynamic_image_size=args.dynamic_image_size,
        keep_fp32=keep,
        int8=read_int8_calibration(args.int8) if args.int8 else None,
        require_atc=args.require_atc,
        atc_timeout=args.atc_timeout,
        opset=args.opset,
        custom_ops=args.custom_ops,
        overwrite=args.force,
        echo=lambda line: logger.info("%s", line),
    )
    prepared = result.prepared
    print(f"prepared {result.output_dir / 'model.onnx'} at opset {prepared.opset}"
          f" (from {prepared.source_opset})")
    for change in prepared.changes:
        print(f"  {change}")
    if result.decomposed:
        print(f"  decomposed edgefuse custom ops into standard ONNX ops: "
              f"{custom_ops_text(result.decomposed)}")
    if result.custom_ops:
        print(f"  needs edgefuse's op package for {custom_ops_text(result.custom_ops)} "
              "(manifest.json custom_ops; compile.sh checks it is installed)")
    parity = prepared.parity
    if parity.get("checked"):
        print(f"  parity with the input on ONNX Runtime: min cosine {parity['min_cosine']:.8f}")
    else:
        print(f"  parity not checked: {parity.get('reason')}")
    for note in result.manifest.extra["precision"]["notes"]:
        print(f"  precision: {note}")
    warnings = [(n.name, f) for n in result.op_support.nodes for f in n.findings]
    for name, finding in warnings:
        print(f"  warning[{finding.check}] {name}: {finding.message}")
    if result.om_path is not None:
        print(f"wrote {result.om_path} for {result.manifest.soc}")
    else:
        print(run_instructions(result))
    return 0
