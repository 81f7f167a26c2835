"""Turn an ONNX file, a TorchScript file or a PyTorch factory into one canonical ONNX model.

The result is checked, has static input shapes, inferred shapes, folded constants, the node
names of the source and an opset in the supported range.

Examples:
  edgefuse convert model.onnx -o model.canon.onnx --input images:1,3,640,640
  edgefuse convert mypackage.nets:resnet50 -o resnet50.onnx --input 1,3,224,224
  edgefuse convert traced.pt -o traced.onnx --input input:1,3,224,224 --opset 13
"""

from __future__ import annotations

import argparse

import onnx

from edgefuse.convert import EXPORTERS, SUPPORTED_OPSETS, convert
from edgefuse.convert.input_spec import format_shape, parse_input_specs

_OPSETS = f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", metavar="SRC",
        help="an .onnx file, a TorchScript file, or package.module:factory (a callable that "
        "returns a torch.nn.Module)",
    )
    parser.add_argument("-o", "--output", required=True, help="where to write the ONNX model")
    parser.add_argument(
        "--input", action="append", default=[], metavar="NAME:D0,D1,...",
        help="static shape of an input (repeat per input; NAME may be left out for a "
        "single-input model); required for PyTorch sources and for dynamic ONNX inputs",
    )
    parser.add_argument(
        "--opset", type=int, metavar="N",
        help=f"opset of the result, in {_OPSETS} (default: the source's, old ones upgraded to "
        f"{SUPPORTED_OPSETS.start}); a down-conversion is verified on ONNX Runtime",
    )
    parser.add_argument(
        "--exporter", choices=EXPORTERS, default="auto",
        help="PyTorch exporter (auto: dynamo; TorchScript for TorchScript files and for "
        "opsets below 18)",
    )


def run(args: argparse.Namespace) -> int:
    model = convert(
        args.source,
        output=args.output,
        inputs=parse_input_specs(args.input),
        opset=args.opset,
        exporter=args.exporter,
    )
    print(summary(model, args.source, args.output))
    return 0


def summary(model: onnx.ModelProto, source: str, output: str) -> str:
    """One paragraph: what came in, how it was exported, what the graph looks like."""
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    opset = next(
        (entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None
    )
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    parts = [
        f"converted {source} -> {output}",
        f"exporter: {metadata.get('edgefuse.exporter', 'unknown')}",
    ]
    if "edgefuse.exporter_fallback" in metadata:
        parts.append(f"fallback because {metadata['edgefuse.exporter_fallback']}")
    if "edgefuse.converted_from_opset" in metadata:
        parts.append(f"opset {metadata['edgefuse.converted_from_opset']} -> {opset}")
    else:
        parts.append(f"opset {opset}")
    parts += [
        f"{len(model.graph.node)} nodes",
        f"inputs: {', '.join(_describe(value) for value in inputs)}",
        f"outputs: {', '.join(_describe(value) for value in model.graph.output)}",
    ]
    return "; ".join(parts) + "."


def _describe(value: onnx.ValueInfoProto) -> str:
    tensor_type = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    dims = [dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or None)
            for dim in tensor_type.shape.dim]
    return f"{value.name} {dtype}[{format_shape(dims)}]"
