"""The segmentation app: a segmentation model over a camera, video, stream or images; class
maps blended over the frames and pixel counts logged.

Thin over ``edgefuse.vision``: a ``Segmenter`` built from the model and the config, the shared
runner for the rest (``edgefuse.apps.runner``).
"""

from __future__ import annotations

import argparse
from typing import Any

from edgefuse.apps.config import SegmentationConfig
from edgefuse.apps.runner import add_common_arguments, config_from_args, run_app
from edgefuse.model_info import AppInfo
from edgefuse.runtime import ModelSource, Session
from edgefuse.vision.segment.segmenter import Segmenter

TASK_FLAGS = ("palette", "alpha", "background", "threshold")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--palette", metavar="voc|cityscapes",
                        help="class colours (a list of colours in the config)")
    parser.add_argument("--alpha", type=float, metavar="A", help="overlay opacity (default 0.5)")
    parser.add_argument("--background", type=int, metavar="ID",
                        help="class left unpainted (default: the model's, else 0)")
    parser.add_argument("--threshold", type=float, metavar="P",
                        help="foreground probability of sigmoid masks (default 0.5)")


def run(args: argparse.Namespace) -> int:
    return run_app(config_from_args(SegmentationConfig, args, TASK_FLAGS), make_segmenter,
                   config_file=args.config)


def make_segmenter(session: Session, info: AppInfo | None, source: ModelSource,
                   config: Any) -> Segmenter:
    return Segmenter(
        session, info=info, manifest=source.manifest, preprocess=config.preprocess,
        label=source.label, class_names=config.class_names, colours=config.palette,
        alpha=config.alpha, background=config.background, threshold=config.threshold,
    )
