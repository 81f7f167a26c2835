"""The segmentation app: a semantic or instance segmentation model over a camera, video, stream
or images; masks blended over the frames with a legend, pixels or instances logged.

Thin over ``edgefuse.vision``: a ``Segmenter`` built from the model and the config, the shared
runner for the rest (``edgefuse.apps.runner``). ``layout:`` in the config overrides the model's
app info (and the layout told from the output shapes), as ``activation:`` does for the graph's.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from edgefuse.apps.config import SegmentationConfig
from edgefuse.apps.runner import add_common_arguments, config_from_args, run_app
from edgefuse.model_info import ACTIVATIONS, LAYOUTS, TASK_OF_LAYOUT, AppInfo
from edgefuse.runtime import ModelSource, Session
from edgefuse.vision.segment.segmenter import Segmenter

TASK_FLAGS = ("layout", "activation", "palette", "alpha", "legend", "background", "threshold",
              "conf", "iou", "max_det", "mask_format", "retina_masks")
SEGMENT_LAYOUTS = [name for name in LAYOUTS if TASK_OF_LAYOUT[name] == "segment"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--layout", metavar="|".join(SEGMENT_LAYOUTS),
                        help="how to read the outputs (default: the model's app info, else told "
                             "from the output shapes)")
    parser.add_argument("--activation", metavar="|".join(ACTIVATIONS),
                        help="what the graph applied to one-channel masks (default: read from "
                             "the graph; sigmoid: probabilities, none: logits)")
    parser.add_argument("--palette", metavar="distinct|voc|cityscapes",
                        help="class colours (a list of colours in the config)")
    parser.add_argument("--alpha", type=float, metavar="A",
                        help="fill opacity (default 0.3; the class's outline is always full)")
    parser.add_argument("--legend", action=argparse.BooleanOptionalAction, default=None,
                        help="draw a legend of the classes in the frame, in class order "
                             "(default: on)")
    parser.add_argument("--background", type=int, metavar="ID",
                        help="class left unpainted (default: the model's, else 0)")
    parser.add_argument("--threshold", type=float, metavar="P",
                        help="foreground probability of one-channel masks (default 0.5)")
    parser.add_argument("--conf", type=float, metavar="P",
                        help="instance score threshold (yolov8_seg; default 0.25)")
    parser.add_argument("--iou", type=float, metavar="P",
                        help="instance NMS IoU threshold (yolov8_seg; default: the model's app "
                             "info, else its exporter's (Ultralytics 0.7), else 0.45)")
    parser.add_argument("--max-det", type=int, metavar="N",
                        help="instances kept per frame (yolov8_seg; default 300)")
    parser.add_argument("--mask-format", choices=("polygon", "rle"),
                        help="instance masks in the JSON Lines (default polygon)")
    parser.add_argument("--retina-masks", action=argparse.BooleanOptionalAction, default=None,
                        help="yolov8_seg masks at frame resolution, as Ultralytics' retina_masks "
                             "(default: off, masks at the model's input resolution)")


def run(args: argparse.Namespace) -> int:
    return run_app(config_from_args(SegmentationConfig, args, TASK_FLAGS), make_segmenter,
                   config_file=args.config)


def make_segmenter(session: Session, info: AppInfo | None, source: ModelSource,
                   config: Any) -> Segmenter:
    if config.layout is not None:
        info = info or AppInfo()
        info = dataclasses.replace(
            info, postprocess=dataclasses.replace(info.postprocess, layout=config.layout),
            decided_by=(*info.decided_by, ("layout", "'layout:' in the config")))
    return Segmenter(
        session, info=info, manifest=source.manifest, preprocess=config.preprocess,
        label=source.label, class_names=config.class_names, colours=config.palette,
        alpha=config.alpha, background=config.background, threshold=config.threshold,
        activation=config.activation, graph=source.onnx, legend=config.legend,
        mask_format=config.mask_format, conf=config.conf, iou=config.iou,
        max_det=config.max_det, retina_masks=config.retina_masks,
    )
