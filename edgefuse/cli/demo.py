"""Run the whole product on the embedded trained models and their sample clip.

Export, convert, optimize, FP16 and INT8 (calibrated on frames of the clip), compile for the Atlas
200I DK A2, then the detection and segmentation apps over the clip: annotated videos, JSON Lines
and a table of parity, FP16 accuracy, INT8 accuracy on the host emulation (a prediction until a
board confirms it) and frame rates in ``--workdir`` (``./edgefuse-demo``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edgefuse._checks import integer_at_least
from edgefuse._files import cannot_write, check_folder_writable, check_outputs_spare_inputs
from edgefuse.demo.run import run_demo
from edgefuse.errors import InputError, Ref
from edgefuse.models._trained import WEIGHTS_DIR
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP

DEFAULT_WORKDIR = "edgefuse-demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR,
                        help=f"where the models, builds, videos and logs go (default: "
                             f"./{DEFAULT_WORKDIR}; files of an earlier run are replaced)")
    parser.add_argument("--max-frames", type=int, metavar="N",
                        help="run the apps on the first N frames of the clip (default: all; the "
                             "multi-camera step always runs its own short clips)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="ONNX Runtime threads per session (default: all cores)")


def run(args: argparse.Namespace) -> int:
    threads = None if args.threads is None else integer_at_least("--threads", args.threads, 1)
    frames = None if args.max_frames is None else integer_at_least("--max-frames",
                                                                   args.max_frames, 1)
    workdir = Path(args.workdir)
    check_outputs_spare_inputs({"--workdir": workdir},
                               {"sample clip": SAMPLE_CLIP, "shipped weights": WEIGHTS_DIR})
    if workdir.exists() and not workdir.is_dir():
        raise InputError(f"--workdir '{workdir}' is a file, not a folder",
                         hint="name a folder (it is created if missing)",
                         reference=Ref.BAD_OUTPUT_PATH)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(workdir.parent, exc) from exc
    check_folder_writable(workdir)
    return run_demo(workdir, threads=threads, max_frames=frames)
