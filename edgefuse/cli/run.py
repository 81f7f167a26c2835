"""Run a model once on the best available backend and show (or save) its outputs.

Inputs come from --input NAME=FILE (.npy, .npz, or an image when OpenCV is installed); inputs
not given are seeded random. The backend that ran, and why others were skipped, is printed.

Examples:
  edgefuse run build/ --input images=frame.jpg --save out.npz
  edgefuse run model.onnx --backend cuda --backend cpu
"""

from __future__ import annotations

import argparse

import numpy as np

from edgefuse._files import atomic_output
from edgefuse.cli._session_args import add_session_arguments, backends_from, session_options
from edgefuse.runtime import open_session, resolve_source
from edgefuse.session_inputs import load_inputs, parse_input_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_session_arguments(parser)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                        help="an input from .npy/.npz/image; repeat for several inputs")
    parser.add_argument("--batch", type=int, metavar="N",
                        help="batch of the random inputs (models with a dynamic batch)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--save", metavar="OUT.npz", help="write every output to an .npz file")


def run(args: argparse.Namespace) -> int:
    source = resolve_source(args.model)
    with open_session(source, backends_from(args), strict=args.strict,
                      **session_options(args)) as session:
        files = parse_input_args(args.input, session.inputs)
        preprocess = source.manifest.preprocess if source.manifest else None
        feeds = load_inputs(files, session.inputs, batch=args.batch, seed=args.seed,
                            preprocess=preprocess)
        outputs = session.run(feeds)
        print(f"backend: {session.backend}")
        for name, reason in session.skipped.items():
            print(f"  skipped {name}: {reason}")
        for name, array in feeds.items():
            source = files.get(name, f"random (seed {args.seed})")
            print(f"input  {name}: {_summary(array)}  <- {source}")
        for name, array in outputs.items():
            print(f"output {name}: {_summary(array)}")
    if args.save:
        with atomic_output(args.save, suffix=".npz") as tmp:
            np.savez(tmp, **outputs)
        print(f"wrote {args.save}")
    return 0


def _summary(array: np.ndarray) -> str:
    text = f"{array.dtype.name}[{','.join(map(str, array.shape))}]"
    if array.size and np.issubdtype(array.dtype, np.number):
        values = array.astype(np.float64)
        text += f"  min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}"
    return text
