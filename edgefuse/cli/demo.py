"""Export a built-in model, convert it, optimize it, verify it against the export, print the report.

Runs on the embedded default (ResNet-50 from the model catalogue, random but deterministic
weights with real BatchNorm statistics) with no file needed; `--model` picks another catalogue
entry. Everything is written to --workdir (a temporary folder by default).

Why it starts from ``torch.onnx.export(dynamo=True, optimize=False)`` and not from
``edgefuse convert`` of the module: that graph, with every BatchNorm a node, is the kind of ONNX
file users hand over, and the one the optimizer has work on; converting the module directly
already gives a fused graph (the optimizer would report that nothing was left to do).
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import onnx

from edgefuse._files import cannot_write, save_onnx
from edgefuse.convert import convert
from edgefuse.convert.torch_export import example_inputs_from_shapes, export_unfused
from edgefuse.errors import InputError, Ref
from edgefuse.models import CATALOGUE, get_entry
from edgefuse.optimize import optimize
from edgefuse.verify import verify


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="resnet50", choices=sorted(CATALOGUE))
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--workdir", help="where to keep the models (default: a temporary folder)")


def run(args: argparse.Namespace) -> int:
    if args.workdir:
        workdir = Path(args.workdir)
        if workdir.exists() and not workdir.is_dir():
            raise InputError(f"--workdir '{workdir}' is a file, not a folder",
                             hint="name a folder (it is created if missing)",
                             reference=Ref.BAD_OUTPUT_PATH)
        try:
            workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise cannot_write(workdir.parent, exc) from exc
        return _demo(args, workdir)
    with tempfile.TemporaryDirectory(prefix="edgefuse-demo-") as workdir:
        return _demo(args, Path(workdir))


def _demo(args: argparse.Namespace, workdir: Path) -> int:
    entry = get_entry(args.model)
    shape = entry.input_shape if args.variant == "full" else entry.tiny_input_shape
    exported = workdir / f"{args.model}.export.onnx"
    converted = workdir / f"{args.model}.onnx"
    optimized = workdir / f"{args.model}.opt.onnx"
    print(f"[1/4] export {args.model} ({args.variant}, input {list(shape)}) as it is often handed "
          f"over: torch.onnx.export(dynamo=True, optimize=False) -> {exported}")
    module = entry.build(args.variant)
    raw = export_unfused(module, example_inputs_from_shapes({"input": shape}),
                         input_names=["input"])
    save_onnx(raw, exported)
    print(f"      {_describe(raw)}")
    print(f"[2/4] convert -> {converted}")
    canonical = convert(exported, output=converted)
    print(f"      {_describe(canonical)}")
    print(f"[3/4] optimize -> {optimized}")
    result = optimize(converted, output=optimized, report_path=workdir / "report.json")
    print(result.report.render())
    print(f"\n[4/4] verify {optimized.name} against {exported.name}")
    verdict = verify(exported, optimized)
    print(verdict.render())
    return 0 if verdict.passed else 1


def _describe(model: onnx.ModelProto) -> str:
    ops = Counter(node.op_type for node in model.graph.node)
    return (f"{sum(ops.values())} nodes, {ops['BatchNormalization']} BatchNormalization, "
            f"opset {next(e.version for e in model.opset_import if e.domain in ('', 'ai.onnx'))}")
