"""Convert a built-in model, optimize it, verify it against the original, print the report.

Runs on the embedded default (ResNet-50 from the model catalogue, random but deterministic
weights with real BatchNorm statistics) with no file needed; `--model` picks another catalogue
entry. Everything is written to --workdir (a temporary folder by default).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edgefuse.convert import convert
from edgefuse.models import CATALOGUE, get_entry
from edgefuse.optimize import optimize
from edgefuse.verify import verify


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="resnet50", choices=sorted(CATALOGUE))
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--workdir", help="where to keep the models (default: a temporary folder)")


def run(args: argparse.Namespace) -> int:
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        return _demo(args, Path(args.workdir))
    with tempfile.TemporaryDirectory(prefix="edgefuse-demo-") as workdir:
        return _demo(args, Path(workdir))


def _demo(args: argparse.Namespace, workdir: Path) -> int:
    entry = get_entry(args.model)
    shape = entry.input_shape if args.variant == "full" else entry.tiny_input_shape
    converted = workdir / f"{args.model}.onnx"
    optimized = workdir / f"{args.model}.opt.onnx"
    print(f"[1/3] convert {args.model} ({args.variant}, input {list(shape)}) -> {converted}")
    convert(entry.build(args.variant), inputs={"input": shape}, output=converted)
    print(f"[2/3] optimize -> {optimized}")
    result = optimize(converted, output=optimized, report_path=workdir / "report.json")
    print(result.report.render())
    print(f"\n[3/3] verify {optimized.name} against {converted.name}")
    verdict = verify(converted, optimized)
    print(verdict.render())
    return 0 if verdict.passed else 1
