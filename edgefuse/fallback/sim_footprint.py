"""How much board memory a build needs: weights + peak activations + I/O buffers, estimated.

Why: a host has gigabytes to spare and never refuses a model; the Atlas 200I DK A2 has 4 GB for
the OS, the app and the model together, and an OM that does not fit fails to load on the board.
The ``sim`` backend refuses such a build up front, with these figures.

The estimate, at the largest gear's shapes (ONNX shape inference with the inputs fixed):
- weights: every initializer and Constant at the dtype the board stores it in: FP16 for a float
  weight a rounded (FP16) node reads, FP32 for one a kept-FP32 node reads (both when both do);
- activations: the peak of the bytes alive while the nodes run in graph order, each intermediate
  tensor allocated by its producer and freed after its last reader, at its stored dtype (FP16
  rounded, FP32 kept, integers as they are); a tensor whose shape inference cannot tell is listed
  in ``unknown`` and not counted;
- I/O: the input buffers (the uint8 frame for an AIPP input) and the output buffers the manifest
  records, at the largest gear.
ATC's memory planner reuses memory at least this well and fuses some tensors away, but adds
workspaces; the estimate is the order of magnitude a budget check needs, not the byte count of
``atc --mode=6``'s memory_size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from edgefuse.fallback.sim_target import format_bytes
from edgefuse.manifest import TensorEntry

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)


@dataclasses.dataclass(frozen=True)
class Footprint:
    """Bytes of board memory a build needs, by kind."""

    weights: int
    activations: int
    io: int
    unknown: tuple[str, ...] = ()  # tensors whose size shape inference could not tell

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.io

    def describe(self) -> str:
        text = (f"{format_bytes(self.total)} (weights {format_bytes(self.weights)} + peak "
                f"activations {format_bytes(self.activations)} + I/O buffers "
                f"{format_bytes(self.io)})")
        if self.unknown:
            text += f"; {len(self.unknown)} tensor(s) of unknown size not counted"
        return text

    def to_json(self) -> dict[str, object]:
        return {"weights": self.weights, "activations": self.activations, "io": self.io,
                "total": self.total, "unknown": list(self.unknown)}


def estimate_footprint(
    model: onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]],
    input_buffers: Sequence[tuple[TensorEntry, Sequence[int]]],
    outputs: Sequence[TensorEntry],
    rounded: bool,
    kept: frozenset[str],
) -> Footprint:
    """The footprint of ``model`` run at ``input_shapes`` (model input name -> shape).

    ``input_buffers``: each manifest input with the concrete shape of its buffer; ``outputs``:
    the manifest's outputs (dtype as the OM gives it, shape from inference); ``rounded``: float
    tensors are stored in FP16 except the outputs of the ``kept`` nodes.
    """
    shapes, types = _inferred(model, input_shapes)
    graph = model.graph
    unknown: list[str] = [entry.name for entry in outputs if entry.name not in shapes]
    io = sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(entry.dtype).itemsize
             for entry, shape in input_buffers)
    io += sum(int(np.prod(shapes[entry.name], dtype=np.int64)) * np.dtype(entry.dtype).itemsize
              for entry in outputs if entry.name in shapes)

    def stored_size(name: str, producer: str | None) -> int | None:
        elem = types.get(name)
        shape = shapes.get(name)
        if elem is None or shape is None:
            return None
        return int(np.prod(shape, dtype=np.int64)) * _itemsize(elem, rounded and
                                                              producer not in kept)

    weights = sum(_weight_bytes(graph, rounded, kept))
    boundary = {v.name for v in graph.input} | {v.name for v in graph.output}
    constants = {init.name for init in graph.initializer}
    last_reader: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name:
                last_reader[name] = index
    live: dict[str, int] = {}
    current = peak = 0
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant":
            continue  # counted with the weights
        for name in node.output:
            if not name or name in boundary or name in constants:
                continue
            size = stored_size(name, node.name)
            if size is None:
                unknown.append(name)
                continue
            live[name] = size
            current += size
        peak = max(peak, current)  # the node's inputs and outputs are alive together
        for name in [n for n in live if last_reader.get(n, -1) <= index]:
            current -= live.pop(name)
    return Footprint(weights, peak, io, tuple(unknown))


def _inferred(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]
              ) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Concrete shapes and element types of every tensor shape inference can tell."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    del fixed.graph.value_info[:]
    for value in fixed.graph.input:
        if value.name in input_shapes:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in input_shapes[value.name]:
                dims.add().dim_value = int(size)
    for value in fixed.graph.output:
        value.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(fixed, strict_mode=False, data_prop=True)
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    graph = inferred.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        if tensor.elem_type:
            types[value.name] = tensor.elem_type
        dims = tensor.shape.dim
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    return shapes, types


def _weight_bytes(graph: onnx.GraphProto, rounded: bool, kept: frozenset[str]) -> list[int]:
    readers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.name)
    sizes = []
    tensors = [(init.name, init) for init in graph.initializer]
    tensors += [(node.output[0], attribute.t) for node in graph.node if node.op_type == "Constant"
                for attribute in node.attribute if attribute.name == "value"]
    for name, tensor in tensors:
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if tensor.data_type not in _FLOAT_TYPES or not rounded:
            sizes.append(count * _itemsize(tensor.data_type, False))
            continue
        by = readers.get(name, [])
        fp16 = not by or any(reader not in kept for reader in by)
        fp32 = any(reader in kept for reader in by)
        sizes.append(count * (2 * fp16 + 4 * fp32))
    return sizes


def _itemsize(elem_type: int, fp16: bool) -> int:
    if fp16 and elem_type in _FLOAT_TYPES:
        return 2
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 4  # strings and other types numpy cannot size: a guess of one word
