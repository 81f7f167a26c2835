"""Arguments verbs share: the model, the backend order and strictness of those that open a
Session, and the inputs file of every verb that runs a model.

Why one place: ``run`` and ``bench`` must pick backends exactly as ``open_session`` does, and a
user who learns ``--backend cuda --backend cpu`` or ``--inputs x.npz`` once should find it the
same in every verb.
"""

from __future__ import annotations

import argparse

from edgefuse.fallback.sim_target import DEFAULT_SIM_SOC
from edgefuse.runtime import BACKENDS, DEFAULT_BACKENDS


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL|BUILD_DIR",
                        help="an .onnx file, an .om file, or a directory from `edgefuse compile`")
    add_backend_arguments(parser)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """The backend order, strictness and the options of the session a verb opens."""
    parser.add_argument(
        "--backend", action="append", metavar="NAME",
        help=f"backend to try, in order; repeat or comma-separate (known: {', '.join(BACKENDS)}; "
             f"default: {','.join(DEFAULT_BACKENDS)}). One backend alone is strict",
    )
    parser.add_argument("--strict", action="store_true",
                        help="fail instead of falling back to the CPU when no listed backend runs")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="ONNX Runtime intra-op threads (default: ONNX Runtime's choice)")
    parser.add_argument("--device-id", type=int, default=0, metavar="N",
                        help="NPU or GPU to use (default 0)")
    parser.add_argument("--sim-soc", metavar="SOC",
                        help=f"sim backend: the soc to simulate (default {DEFAULT_SIM_SOC}, the "
                             "Atlas 200I DK A2); a build for another soc is refused")
    parser.add_argument("--sim-memory", metavar="SIZE",
                        help="sim backend: the board's memory, in bytes or e.g. 4GiB (default: "
                             "the simulated board's own, 4GiB for the 200I DK A2)")


def add_inputs_argument(parser: argparse.ArgumentParser, purpose: str = "inputs", *,
                        images: bool = False, preprocess: bool = True,
                        without: str = "seeded random inputs") -> None:
    """``--inputs FILE.npz|DIR``: the one file format for model inputs on every verb; with
    ``images``, also a folder of images or a video, and ``--preprocess`` for how they are fed;
    ``without``: what the verb does when none are given; ``preprocess=False`` for a verb that
    feeds images plainly resized to the input (bench: the values do not change the timing)."""
    more = ", a folder of images or a video (one-image models)" if images else ""
    parser.add_argument(
        "--inputs", metavar="FILE.npz|DIR" + ("|VIDEO" if images else ""),
        help=f"{purpose}: an .npz with one array per input name, a folder of .npz files "
             f"(one per sample){more}; default: {without}",
    )
    if images and preprocess:
        parser.add_argument(
            "--preprocess", metavar="SPEC.yaml",
            help="how images become the model input (size, resize/letterbox, color, scale, "
                 "mean, std, layout); default: the model's own record, else a plain resize "
                 "to its input, RGB, 0..1",
        )


def backends_from(args: argparse.Namespace) -> tuple[str, ...]:
    """The --backend values, flattened; the default order when none were given."""
    if not args.backend:
        return DEFAULT_BACKENDS
    return tuple(name.strip() for value in args.backend for name in value.split(",")
                 if name.strip())


def session_options(args: argparse.Namespace) -> dict[str, object]:
    options: dict[str, object] = {"device_id": args.device_id}
    if args.threads is not None:
        options["threads"] = args.threads
    if args.sim_soc is not None:
        options["soc"] = args.sim_soc
    if args.sim_memory is not None:
        options["memory"] = args.sim_memory
    return options
