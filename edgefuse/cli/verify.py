"""Compare a candidate model with a reference on the same inputs (exit 1 when a gate fails).

Runs both on ONNX Runtime CPU with graph optimizations off, on seeded random inputs that fit the
reference's input spec or on --inputs FILE.npz, and reports per output the cosine similarity, the
max absolute error and the relative L2 error.
"""

from __future__ import annotations

import argparse

from edgefuse.verify import DEFAULT_MIN_COSINE, verify


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", help="reference ONNX file")
    parser.add_argument("candidate", help="candidate ONNX file")
    parser.add_argument("--inputs", metavar="FILE.npz", help="inputs, one array per input name")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--min-cosine", type=float, default=DEFAULT_MIN_COSINE, metavar="C")
    parser.add_argument("--max-rel-l2", type=float, default=None, metavar="E")
    parser.add_argument("--json", metavar="R.json", help="also write the result as JSON")


def run(args: argparse.Namespace) -> int:
    result = verify(
        args.reference,
        args.candidate,
        inputs=args.inputs,
        seed=args.seed,
        min_cosine=args.min_cosine,
        max_rel_l2=args.max_rel_l2,
        json_path=args.json,
    )
    print(result.render())
    return 0 if result.passed else 1
