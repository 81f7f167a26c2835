"""FLOPs and bytes moved per node, computed from the graph's shapes.

Why from the graph and not from a profiler's counters: the host profiler has none, the board's
PMU counters need a board, and a roofline floor has to exist before either. The conventions are
the usual ones of roofline analysis (and of fvcore / ptflops, less their MAC = 1 choice):

- one multiply-accumulate is 2 FLOPs; a bias add is 1 FLOP per output element;
- Conv: ``2 * out_elements * (C_in / group) * prod(kernel)`` (+ bias), so a depthwise Conv
  (``group == C_in``) costs ``2 * out_elements * prod(kernel)``; ConvTranspose:
  ``2 * in_elements * (C_out / group) * prod(kernel)`` (+ bias);
- Gemm ``2 * M * N * K`` (+ ``M * N`` for C); MatMul ``2 * batch * M * N * K``;
- pooling one operation per window element per output (``out * prod(kernel)``), global pooling
  one per input element;
- elementwise ops and activations one operation per output element; BatchNormalization 2
  (scale, shift), Softmax 3 (exp, sum, divide), LayerNorm / InstanceNorm 5 per element;
  reductions one per input element; Resize one (nearest) or 4 (linear) per output element;
- data-movement ops (Reshape, Transpose, Concat, Slice, Gather, Pad, Cast, ...) 0 FLOPs;
- bytes: every input (weights included) read once and every output written once, at the
  tensor's dtype; ``Shape``/``Size`` read no data. Ops outside these lists get ``flops=None``
  (shown as not counted, never as zero).

The ``unit`` says which unit of an Ascend AI Core the op would run on: ``cube`` (the matrix unit:
Conv, ConvTranspose, Gemm, MatMul) or ``vector`` (everything else).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.helper
import onnx.shape_inference

CUBE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger",
                      "ConvInteger", "QLinearConv", "QLinearMatMul"})
_ONE_PER_OUTPUT = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Relu", "LeakyRelu", "PRelu",
    "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip", "Exp", "Log", "Sqrt", "Reciprocal",
    "Neg", "Abs", "Erf", "Elu", "Selu", "Celu", "Gelu", "Mish", "Softplus", "Softsign", "Swish",
    "Floor", "Ceil", "Round", "Sign", "Where", "Equal", "Greater", "Less", "GreaterOrEqual",
    "LessOrEqual", "And", "Or", "Not", "Xor", "Mod", "ThresholdedRelu", "Sin", "Cos",
    "QuantizeLinear", "DequantizeLinear",
})
_PER_OUTPUT = {"BatchNormalization": 2, "Softmax": 3, "LogSoftmax": 3, "LayerNormalization": 5,
               "InstanceNormalization": 5, "GroupNormalization": 5, "LpNormalization": 3}
_REDUCTIONS = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ArgMax",
                         "ArgMin", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
_WINDOW_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
_MOVEMENT = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Pad", "Cast",
    "CastLike", "Identity", "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Constant",
    "ConstantOfShape", "Range", "NonZero", "TopK", "Dropout", "Trilu", "OneHot",
})
_METADATA_ONLY = frozenset({"Shape", "Size"})


@dataclasses.dataclass(frozen=True)
class NodeCost:
    """What one node computes and moves, at the shapes it ran with."""

    flops: int | None  # None: an op these rules do not count
    bytes_read: int
    bytes_written: int
    unit: str  # "cube" or "vector"

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...] | None  # None when shape inference could not tell
    itemsize: int

    @property
    def elements(self) -> int | None:
        return None if self.shape is None else math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return 0 if self.shape is None else math.prod(self.shape) * self.itemsize


def tensor_infos(model: onnx.ModelProto,
                 input_shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, TensorInfo]:
    """Shape and item size of every tensor of the main graph, with the inputs fixed to
    ``input_shapes`` (the shapes the model ran with) so dynamic dimensions resolve."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        shape = (input_shapes or {}).get(value.name)
        if shape is None:
            continue
        dims = value.type.tensor_type.shape
        dims.ClearField("dim")
        for size in shape:
            dims.dim.add().dim_value = int(size)
    inferred = onnx.shape_inference.infer_shapes(fixed, data_prop=True)
    graph = inferred.graph
    infos: dict[str, TensorInfo] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        infos[value.name] = _info(value.type.tensor_type)
    for init in graph.initializer:
        infos[init.name] = TensorInfo(tuple(init.dims), _itemsize(init.data_type))
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] not in infos:
            tensor = next((a.t for a in node.attribute if a.name == "value"), None)
            if tensor is not None:
                infos[node.output[0]] = TensorInfo(tuple(tensor.dims),
                                                   _itemsize(tensor.data_type))
    return infos


def node_cost(node: onnx.NodeProto, infos: Mapping[str, TensorInfo]) -> NodeCost:
    """The FLOPs and bytes of ``node`` given the tensor shapes ``infos``."""
    inputs = [infos.get(name) if name else None for name in node.input]
    outputs = [infos.get(name) for name in node.output if name]
    read = 0 if node.op_type in _METADATA_ONLY else sum(i.nbytes for i in inputs if i)
    written = sum(o.nbytes for o in outputs if o)
    unit = "cube" if node.op_type in CUBE_OPS else "vector"
    return NodeCost(_flops(node, inputs, outputs), read, written, unit)


def _flops(node: onnx.NodeProto, inputs: list[TensorInfo | None],
           outputs: list[TensorInfo | None]) -> int | None:
    op = node.op_type
    out = outputs[0].elements if outputs and outputs[0] is not None else None
    first = inputs[0].elements if inputs and inputs[0] is not None else None
    if op in _MOVEMENT or op in _METADATA_ONLY:
        return 0
    if op in ("Conv", "ConvTranspose"):
        return _conv_flops(node, inputs, out)
    if op == "Gemm":
        return _gemm_flops(node, inputs, out)
    if op == "MatMul":
        if out is None or inputs[0] is None or inputs[0].shape is None:
            return None
        return 2 * out * inputs[0].shape[-1]
    if op in _WINDOW_POOLS:
        kernel = _attribute(node, "kernel_shape")
        return None if out is None or kernel is None else out * math.prod(kernel)
    if op in _REDUCTIONS:
        return first
    if op in ("Resize", "Upsample"):
        per = 1 if (_attribute(node, "mode") or b"nearest") == b"nearest" else 4
        return None if out is None else per * out
    if op in _ONE_PER_OUTPUT:
        return out
    if op in _PER_OUTPUT:
        return None if out is None else _PER_OUTPUT[op] * out
    return None


def _conv_flops(node: onnx.NodeProto, inputs: list[TensorInfo | None],
                out: int | None) -> int | None:
    data, weight = inputs[0], inputs[1]
    if out is None or data is None or weight is None or weight.shape is None \
            or data.elements is None:
        return None
    # The weight's second dimension is C_in / group (Conv) or C_out / group (ConvTranspose),
    # so grouped and depthwise convolutions need no separate case.
    kernel = math.prod(weight.shape[2:])
    has_bias = len(inputs) > 2 and inputs[2] is not None
    if node.op_type == "Conv":  # weight [C_out, C_in / group, k...]
        return 2 * out * weight.shape[1] * kernel + (out if has_bias else 0)
    # ConvTranspose: weight [C_in, C_out / group, k...]; every input element is scattered
    return 2 * data.elements * weight.shape[1] * kernel + (out if has_bias else 0)


def _gemm_flops(node: onnx.NodeProto, inputs: list[TensorInfo | None],
                out: int | None) -> int | None:
    a = inputs[0]
    if out is None or a is None or a.shape is None or len(a.shape) != 2:
        return None
    k = a.shape[0] if _attribute(node, "transA") else a.shape[1]
    has_c = len(inputs) > 2 and inputs[2] is not None
    return 2 * out * k + (out if has_c else 0)


def _attribute(node: onnx.NodeProto, name: str):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return None


def _info(tensor_type: onnx.TypeProto.Tensor) -> TensorInfo:
    itemsize = _itemsize(tensor_type.elem_type)
    if not tensor_type.HasField("shape"):
        return TensorInfo(None, itemsize)
    dims = []
    for dim in tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            return TensorInfo(None, itemsize)
        dims.append(dim.dim_value)
    return TensorInfo(tuple(dims), itemsize)


def _itemsize(elem_type: int) -> int:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
