"""Host emulation of FP16 storage: every FP16 tensor rounded to FP16, computed in FP32.

Why not simply run the FP16 model on ONNX Runtime: ORT's CPU provider has FP16 kernels for a
handful of data-movement ops only and runs everything else in FP32 between inserted Casts; when two
such ops follow each other it drops the FP32->FP16->FP32 round trip between them, even with graph
optimizations disabled (measured with ORT 1.31: ``(1366 * 1.5) - 2048`` in an FP16 graph gives 1,
the FP16 answer is 0). So host numbers for an FP16 model are too good. The board stores every
intermediate tensor in FP16, which this module reproduces exactly by rewriting the model into FP32
with an explicit ``Cast(to=FLOAT16) -> Cast(to=FLOAT)`` after every tensor the board holds in
FP16; ORT executes explicit Cast pairs as written (checked in the tests at every optimization
level), and the runner here disables graph optimizations anyway.

Which tensors are rounded:
- a model with FP16 tensors (what ``quantize`` writes): exactly its FP16 tensors; its FP32
  islands stay FP32, as on the board with ``--keep_dtype``;
- a pure FP32 model: every float tensor, weights and graph inputs included, except the outputs of
  nodes named in ``keep_fp32``. This is ATC's default ``--precision_mode=force_fp16`` applied to
  the FP32 model: what the board computes if nothing is kept.

What it does not capture (so host parity predicts the board, but does not equal it):
- accumulation inside an op: the Cube unit multiplies FP16 and accumulates in FP32 (close to this
  emulation), but vector ops (Exp, Sigmoid, Softmax, reductions, normalisations) compute in FP16 on
  the board and here in FP32 before the output is rounded;
- op-specific implementations: the board's Sigmoid/Exp/Div use approximations, its Resize and
  pooling kernels may order arithmetic differently, and ATC fusions (Conv+BN+ReLU, ...) skip the
  rounding of the tensors they fuse away, so the board is sometimes closer to FP32 than this;
- FP16 overflow inside an op whose output is in range (a large dot product's partial sums).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from edgefuse.reference.onnx_runner import run_onnx, with_outputs

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16
FP16_MAX = 65504.0  # the largest finite float16
_DTYPE_ATTRIBUTES = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "EyeLike", "Multinomial"}


def has_fp16(model: onnx.ModelProto, types: Mapping[str, int] | None = None) -> bool:
    """True when any input, output, initializer or inferred intermediate of ``model`` is FP16.

    ``types``: ``tensor_types(model)`` when the caller has it already (it runs shape inference).
    """
    return FLOAT16 in (tensor_types(model) if types is None else types).values()


def tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every named tensor (inputs, initializers, node outputs) ONNX can infer."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    graph = inferred.graph
    types: dict[str, int] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
    return types


def fp16_storage_model(
    model: onnx.ModelProto,
    *,
    keep_fp32: Collection[str] = (),
    force_fp16: bool | None = None,
    types: Mapping[str, int] | None = None,
) -> onnx.ModelProto:
    """An FP32 model computing what ``model`` computes when its FP16 tensors are stored in FP16.

    ``force_fp16``: True rounds every float tensor of an FP32 model (but ``keep_fp32`` nodes'
    outputs), False rounds only the tensors ``model`` declares FP16 (a quantized model whose
    nodes all stayed FP32 runs unchanged), None picks False when ``model`` holds FP16 tensors.
    Tensor names are unchanged: the rounded value carries the original name (the raw op output is
    renamed ``<name>.unrounded``), so a tensor can be read from the emulated model by its name.
    ``types``: ``tensor_types(model)`` when the caller has it already.
    """
    types = tensor_types(model) if types is None else types
    declared = FLOAT16 in types.values()
    if force_fp16 and declared:
        raise ValueError("force_fp16 applies to FP32 models; this one already holds FP16 tensors")
    emulated = onnx.ModelProto()
    emulated.CopyFrom(model)
    graph = emulated.graph
    names = set(types) | {n.name for n in graph.node}
    keep = set(keep_fp32)
    if declared or force_fp16 is False:
        rounded, read_rounded = _fp16_model_to_fp32(graph, types), set()
    else:
        rounded = _round_fp32_model(graph, types, keep, names)
        read_rounded = _kept_outputs_read_by_fp16(graph, types, keep)
    _insert_rounding(graph, rounded, names, read_rounded=read_rounded, keep=keep)
    del graph.value_info[:]
    return emulated


def _fp16_model_to_fp32(graph: onnx.GraphProto, types: Mapping[str, int]) -> set[str]:
    """Retype every FP16 tensor to FP32; return the names that must be rounded."""
    rounded = {name for name, elem in types.items() if elem == FLOAT16}
    initializer_names = {init.name for init in graph.initializer}
    for index, init in enumerate(graph.initializer):
        if init.data_type == FLOAT16:
            array = numpy_helper.to_array(init).astype(np.float32)
            graph.initializer[index].CopyFrom(numpy_helper.from_array(array, init.name))
    rounded -= initializer_names  # FP16 constants are exact in FP32 already
    for info in [*graph.input, *graph.output]:
        if info.type.tensor_type.elem_type == FLOAT16:
            info.type.tensor_type.elem_type = FLOAT
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i == FLOAT16:
                attribute.i = FLOAT
            elif attribute.name == "dtype" and node.op_type in _DTYPE_ATTRIBUTES:
                attribute.i = FLOAT if attribute.i == FLOAT16 else attribute.i
            elif attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == FLOAT16:
                array = numpy_helper.to_array(attribute.t).astype(np.float32)
                attribute.t.CopyFrom(numpy_helper.from_array(array, attribute.t.name))
    return rounded


def _round_fp32_model(
    graph: onnx.GraphProto, types: Mapping[str, int], keep: set[str], names: set[str]
) -> set[str]:
    """Round FP32 weights read by non-kept nodes; return the activations that must be rounded."""
    kept_readers: dict[str, bool] = {}
    for node in graph.node:
        for name in node.input:
            kept_readers[name] = kept_readers.get(name, False) or node.name in keep
    for index, init in enumerate(list(graph.initializer)):  # the FP32 copies appended stay
        if init.data_type != FLOAT:
            continue
        array = numpy_helper.to_array(init)
        with np.errstate(over="ignore"):
            rounded = array.astype(np.float16).astype(np.float32)
        if kept_readers.get(init.name):
            original = f"{init.name}.fp32"
            names.add(original)
            graph.initializer.append(numpy_helper.from_array(array, original))
            for node in graph.node:
                if node.name in keep:
                    node.input[:] = [original if i == init.name else i for i in node.input]
        graph.initializer[index].CopyFrom(numpy_helper.from_array(rounded, init.name))
    rounded_names = {v.name for v in graph.input if types.get(v.name) == FLOAT}
    for node in graph.node:
        if node.name in keep:
            continue
        rounded_names.update(o for o in node.output if o and types.get(o) == FLOAT)
    return rounded_names - {init.name for init in graph.initializer}


def _kept_outputs_read_by_fp16(
    graph: onnx.GraphProto, types: Mapping[str, int], keep: set[str]
) -> set[str]:
    """FP32 outputs of kept nodes that a non-kept (FP16) node reads: it reads them rounded."""
    kept_outputs = {
        o for node in graph.node if node.name in keep for o in node.output
        if o and types.get(o) == FLOAT
    }
    return {i for node in graph.node if node.name not in keep for i in node.input
            if i in kept_outputs}


def _insert_rounding(
    graph: onnx.GraphProto,
    rounded: set[str],
    names: set[str],
    *,
    read_rounded: set[str],
    keep: set[str],
) -> None:
    """Round ``rounded`` tensors in place, and ``read_rounded`` ones for non-kept readers only."""
    def unique(name: str) -> str:
        candidate, counter = name, 1
        while candidate in names:
            counter += 1
            candidate = f"{name}.{counter}"
        names.add(candidate)
        return candidate

    def pair(source: str, target: str) -> list[onnx.NodeProto]:
        half = unique(f"{target}.fp16")
        return [
            onnx.helper.make_node("Cast", [source], [half], to=FLOAT16, name=unique(f"{half}.q")),
            onnx.helper.make_node("Cast", [half], [target], to=FLOAT, name=unique(f"{target}.dq")),
        ]

    nodes: list[onnx.NodeProto] = []
    input_renames: dict[str, str] = {}
    for value in graph.input:
        if value.name in rounded:
            target = unique(f"{value.name}.rounded")
            input_renames[value.name] = target
            nodes += pair(value.name, target)
    reader_renames: dict[str, str] = {}
    for node in graph.node:
        node.input[:] = [input_renames.get(i, i) for i in node.input]
        if node.name not in keep:
            node.input[:] = [reader_renames.get(i, i) for i in node.input]
        nodes.append(node)
        for position, output in enumerate(node.output):
            if output in rounded:
                raw = unique(f"{output}.unrounded")
                node.output[position] = raw
                nodes += pair(raw, output)
            elif output in read_rounded:
                reader_renames[output] = unique(f"{output}.rounded")
                nodes += pair(output, reader_renames[output])
    del graph.node[:]
    graph.node.extend(nodes)


def coerce_feeds(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feeds cast to the dtypes ``model`` declares (FP16 feeds for an emulated FP32 input)."""
    declared = {
        v.name: onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
        for v in model.graph.input if v.type.tensor_type.elem_type
    }
    return {
        name: np.asarray(array).astype(declared[name], copy=False) if name in declared else array
        for name, array in feeds.items()
    }


def run_fp16_storage(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    keep_fp32: Collection[str] = (),
    force_fp16: bool | None = None,
    extra_outputs: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """Run ``model`` on the host with FP16 storage emulated (``fp16_storage_model``); outputs
    (and ``extra_outputs``) by name."""
    emulated = with_outputs(
        fp16_storage_model(model, keep_fp32=keep_fp32, force_fp16=force_fp16), extra_outputs
    )
    return run_onnx(emulated, coerce_feeds(emulated, feeds))
