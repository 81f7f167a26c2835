"""Fold and fuse an ONNX model for a target, and report what fired and why not.

Examples:
  edgefuse optimize model.onnx -o model.opt.onnx --report report.json
  edgefuse optimize model.onnx -o out.onnx --skip fold-pad-into-conv
  edgefuse optimize yolov8n.onnx -o det.onnx --target Ascend310B4 \
      --yolo-head conf=0.25,iou=0.45,max_det=300
"""

from __future__ import annotations

import argparse

from edgefuse.optimize import optimize
from edgefuse.optimize.append_yolo_head import OPTION_KEYS, parse_yolo_head
from edgefuse.optimize.pipeline import HOST_TARGETS


def _ids(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="input ONNX file")
    parser.add_argument("-o", "--output", required=True, help="where to write the optimized ONNX")
    parser.add_argument("--report", metavar="R.json", help="also write the report as JSON")
    parser.add_argument(
        "--target",
        default="cpu",
        help=f"{', '.join(HOST_TARGETS)}, or an Ascend soc such as Ascend310B4 (adds its rules)",
    )
    parser.add_argument("--only", type=_ids, metavar="IDS", help="comma-separated rule ids to run")
    parser.add_argument("--skip", type=_ids, metavar="IDS", help="comma-separated rule ids to skip")
    parser.add_argument(
        "--yolo-head",
        nargs="?",
        const="",
        metavar="K=V,...",
        help="append the device-side YOLO decode + NMS (edgefuse::YoloHead): the model then "
        "returns boxes, scores, classes, num_detections (app layout yolo_head). Keys: "
        f"{', '.join(OPTION_KEYS)}; alone: conf=0.25,iou=0.45,max_det=300",
    )


def run(args: argparse.Namespace) -> int:
    head = parse_yolo_head(args.yolo_head) if args.yolo_head is not None else None
    result = optimize(
        args.model,
        output=args.output,
        target=args.target,
        only=args.only,
        skip=args.skip,
        report_path=args.report,
        yolo_head=head,
    )
    print(result.report.render())
    print(f"\nwrote {args.output}")
    return 0
