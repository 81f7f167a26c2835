"""Run a model on the best available backend and show (or save) its outputs.

Inputs come from --inputs FILE.npz (one array per input name) or a folder of .npz files (one per
sample), the same files verify and quantize read; from --frames DIR (images, or a video), each
prepared as the apps prepare it (an AIPP build takes the uint8 frame); without them, seeded random
inputs. The backend that ran, and why others were skipped, is printed.

--record OUT.npz stores the inputs fed and the outputs given, with the backend, soc, build digest
and edgefuse version: goldens that `edgefuse verify --against OUT.npz BUILD_DIR --backend B` and
the pytest kit (edgefuse.testing.assert_replays) hold another backend against.

Examples:
  edgefuse run build/ --inputs frame.npz --save out.npz
  edgefuse run model.onnx --backend cuda --backend cpu
  edgefuse run build/ --backend acl --frames frames/ --record golden.npz   # on the board
  edgefuse run build/ --backend sim --inputs frame.npz                      # the board, simulated
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from edgefuse._files import atomic_output, check_distinct_outputs, check_outputs_spare_inputs
from edgefuse.cli._session_args import (
    add_inputs_argument,
    add_session_arguments,
    backends_from,
    session_options,
)
from edgefuse.errors import InputError, Ref
from edgefuse.goldens import frame_samples, record_runs
from edgefuse.model_source import resolve_source
from edgefuse.reference.feeds import feed_set, load_inputs, parse_input_args
from edgefuse.runtime import open_session

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_session_arguments(parser)
    add_inputs_argument(parser)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                        help="deprecated: an input from .npy/.npz/image; use --inputs FILE.npz")
    parser.add_argument("--batch", type=int, metavar="N",
                        help="batch of the random inputs (models with a dynamic batch)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--frames", metavar="DIR|VIDEO",
                        help="images (a folder, a glob, one image) or a video, each prepared as "
                             "the apps prepare frames for this model")
    parser.add_argument("--save", metavar="OUT.npz", help="write every output to an .npz file")
    parser.add_argument("--record", metavar="OUT.npz",
                        help="write the inputs and outputs of every sample, with the backend, "
                             "soc, build digest and edgefuse version (a recording)")


def run(args: argparse.Namespace) -> int:
    check_distinct_outputs(save=args.save, record=args.record)
    check_outputs_spare_inputs(
        {"--save output": args.save, "--record output": args.record},
        {"model": args.model, "--inputs": args.inputs, "--frames": args.frames,
         "--input files": [item.partition("=")[2] for item in args.input]})
    if args.frames and (args.inputs or args.input):
        raise InputError("--frames and --inputs/--input both give the inputs",
                         hint="give one of them", reference=Ref.BAD_INPUT_ARGUMENT)
    source = resolve_source(args.model)
    with open_session(source, backends_from(args), strict=args.strict,
                      **session_options(args)) as session:
        origin: dict[str, str] = {}
        if args.frames:
            samples = frame_samples(session, source, args.frames)
            origin = {spec.name: f"{args.frames} (prepared)" for spec in session.inputs}
        elif args.input:
            log.warning("--input NAME=FILE is deprecated; save the inputs with "
                        "numpy.savez(FILE, NAME=array) and pass --inputs FILE.npz")
            aipp = source.manifest.preprocess.spec if source.manifest and \
                source.manifest.preprocess else None
            files = parse_input_args(args.input, session.inputs)
            samples = [load_inputs(files, session.inputs, batch=args.batch, seed=args.seed,
                                   aipp=aipp)]
            origin = {name: str(path) for name, path in files.items()}
        else:
            samples = feed_set(session.inputs, args.inputs, seed=args.seed, batch=args.batch)
        recording = None
        if args.record:
            recording = record_runs(session, samples, model=source,
                                    created_by=getattr(args, "command_line", None))
            outputs = recording.outputs
        else:
            outputs = [session.run(feeds) for feeds in samples]
        print(f"backend: {session.backend}")
        for name, reason in session.skipped.items():
            print(f"  skipped {name}: {reason}")
        for index, (feeds, results) in enumerate(zip(samples, outputs, strict=True)):
            if len(samples) > 1:
                print(f"sample {index}:")
            for name, array in feeds.items():
                where = origin.get(name) or args.inputs or f"random (seed {args.seed})"
                print(f"input  {name}: {_summary(array)}  <- {where}")
            for name, array in results.items():
                print(f"output {name}: {_summary(array)}")
    if args.save:
        saved = outputs[0] if len(outputs) == 1 else {
            f"{index}/{name}": array for index, results in enumerate(outputs)
            for name, array in results.items()}
        with atomic_output(args.save, suffix=".npz") as tmp:
            np.savez(tmp, **saved)
        print(f"wrote {args.save}")
    if recording is not None:
        recording.save(args.record)
        print(f"recorded {args.record}: {recording.describe()}")
    return 0


def _summary(array: np.ndarray) -> str:
    text = f"{array.dtype.name}[{','.join(map(str, array.shape))}]"
    if array.size and np.issubdtype(array.dtype, np.number):
        values = array.astype(np.float64)
        text += f"  min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}"
    return text
