"""The detection app: a detector over a camera, video, stream or images; boxes drawn and logged.

Thin over ``edgefuse.vision``: a ``Detector`` built from the model and the config, the shared
runner for the rest (``edgefuse.apps.runner``).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from edgefuse.apps.config import DetectionConfig
from edgefuse.apps.runner import add_common_arguments, class_ids, config_from_args, run_app
from edgefuse.model_info import BOX_FORMATS, AppInfo
from edgefuse.runtime import ModelSource, Session
from edgefuse.vision.detect.detector import Detector

TASK_FLAGS = ("conf", "iou", "max_det", "classes", "agnostic_nms", "line_width", "layout",
              "strides", "box_format", "track", "serve", "event_media")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--conf", type=float, metavar="T",
                        help="score threshold (default: the model's, else 0.25)")
    parser.add_argument("--iou", type=float, metavar="T",
                        help="NMS IoU threshold (default: the model's app info, else its "
                             "exporter's (Ultralytics 0.7), else 0.45)")
    parser.add_argument("--max-det", type=int, metavar="N", help="boxes per frame (default 300)")
    parser.add_argument("--classes", metavar="ID|NAME,...", help="keep only these classes")
    parser.add_argument("--agnostic-nms", action=argparse.BooleanOptionalAction, default=None,
                        help="NMS across classes (default: the layout's own; YOLOX's is)")
    parser.add_argument("--layout", metavar="NAME",
                        help="output layout: yolov8, yolov5, yolo_head, yolox, end2end, ppyoloe "
                             "(default: told from the outputs and the graph)")
    parser.add_argument("--strides", metavar="S,S,...",
                        help="FPN strides of a yolox or PicoDet head (default: 8,16,32 / "
                             "from the shapes)")
    parser.add_argument("--box-format", choices=BOX_FORMATS,
                        help="boxes of an end2end [1, K, 6] output: xyxy (input pixels) or "
                             "cxcywh (normalised) (default: the model's record, else the graph)")
    parser.add_argument("--line-width", type=int, metavar="PX", help="box line width")
    parser.add_argument("--track", action="store_true", default=None,
                        help="ByteTrack IDs on every box (lines, zones and events in the config "
                             "turn it on too; docs/apps.md)")
    parser.add_argument("--event-media", metavar="DIR",
                        help="a JPEG snapshot of every line crossing and zone entry in DIR "
                             "(and clips with 'clips:' in the config; docs/apps.md)")
    parser.add_argument("--serve", metavar="[HOST:]PORT",
                        help="live view, /metrics and /healthz (default host 127.0.0.1)")


def run(args: argparse.Namespace) -> int:
    return run_app(config_from_args(DetectionConfig, args, TASK_FLAGS), make_detector,
                   config_file=args.config)


def make_detector(session: Session, info: AppInfo | None, source: ModelSource,
                  config: Any) -> Detector:
    detector = Detector(
        session, info=info, manifest=source.manifest, preprocess=config.preprocess,
        label=source.label, conf=config.conf, iou=config.iou, max_det=config.max_det,
        agnostic=config.agnostic_nms, class_names=config.class_names,
        line_width=config.line_width, layout=config.layout, strides=config.strides,
        graph=source.onnx, box_format=config.box_format,
    )
    if config.classes is not None:
        wanted = class_ids(config.classes, detector.class_names)
        detector.options = dataclasses.replace(detector.options, classes=wanted)
    return detector
