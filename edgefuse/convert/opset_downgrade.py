"""Down-convert a model's default-domain opset where ``onnx.version_converter`` gives up.

Why: onnx's converter has no down-adapter for ops whose newer version only widened the accepted
types ("No Adapter From Version $14 for Relu"), so a torch export at opset 17 cannot even reach
opset 13, let alone the 11 that ATC on 310/310B is surest of. Between opsets 11 and 21 most
version bumps of vision ops only add types, or add an attribute whose default keeps the old
behaviour: such nodes mean the same under the older version number (checked against
``onnx.defs`` schemas here, then by ``onnx.checker`` with strict type inference). The others move
an attribute into an input (Split/Squeeze/Unsqueeze/ReduceSum at 13, the other Reduce ops at 18,
Dropout's ratio at 12) and are moved back when that input is a constant; Softmax-family nodes
changed meaning at 13 and are kept only when they reduce the last axis; Split-18's ``num_outputs``
becomes explicit sizes by ONNX's own rounding rule. Anything else is refused
by node name. The caller (prepare.py) still proves the result on ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from edgefuse._graph_walk import all_nodes

_ANY = object()  # the attribute may be dropped whatever its value

# Attributes a newer op version added whose value keeps the older version's behaviour.
_DROPPABLE: dict[tuple[str, str], object] = {
    ("ArgMax", "select_last_index"): 0,
    ("ArgMin", "select_last_index"): 0,
    ("AveragePool", "dilations"): "ones",
    ("BatchNormalization", "training_mode"): 0,
    ("Cast", "saturate"): _ANY,  # only affects float8 targets
    ("Dropout", "seed"): _ANY,  # inference ignores it
    ("GatherND", "batch_dims"): 0,
    ("Reshape", "allowzero"): 0,
    ("Resize", "antialias"): 0,
    ("Resize", "keep_aspect_ratio_policy"): "stretch",
    ("ScatterElements", "reduction"): "none",
    ("ScatterND", "reduction"): "none",
    ("Shape", "start"): 0,
    **{
        (op, "noop_with_empty_axes"): 0
        for op in (
            "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
            "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
        )
    },
}

# (op, input index) that became an input in a newer version and was an attribute before.
_INPUT_TO_ATTRIBUTE: dict[tuple[str, int], str] = {
    ("Split", 1): "split",
    ("Squeeze", 1): "axes",
    ("Unsqueeze", 1): "axes",
    **{
        (op, 1): "axes"
        for op in (
            "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
            "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
        )
    },
}

_OPAQUE_DOMAIN = "edgefuse.opaque"  # where the checker sees the caller's ``opaque`` nodes

_LAST_AXIS_ONLY = ("Softmax", "LogSoftmax", "Hardmax")  # coerce-to-2D semantics before 13


class DowngradeError(Exception):
    """A node that has no equivalent at the target opset, with the reason."""


def downgrade(
    model: onnx.ModelProto, target: int, *, opaque: Collection[str] = ()
) -> onnx.ModelProto:
    """A copy of ``model`` at default-domain opset ``target`` (lower than its own), or raise.

    ``opaque``: default-domain op types ONNX does not define that the caller vouches for at
    every opset (ATC parser plugins registered across opsets, e.g. edgefuse's Swish); they are
    left as they are, and the checker sees them in a domain of their own.
    """
    source = next(e.version for e in model.opset_import if e.domain in ("", "ai.onnx"))
    if target >= source:
        raise ValueError(f"downgrade needs a lower opset than {source}, got {target}")
    result = onnx.shape_inference.infer_shapes(model)  # shapes for Softmax and Split
    constants = _constants(result.graph)
    shapes = _shapes(result.graph)
    new_initializers: list[onnx.TensorProto] = []
    read_before = _read_names(result.graph)
    for node in _default_domain_nodes(result.graph):
        if node.op_type not in opaque:
            _downgrade_node(node, source, target, constants, shapes, new_initializers)
    result.graph.initializer.extend(new_initializers)
    _drop_orphaned_initializers(result.graph, read_before)
    for entry in result.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = target
    del result.graph.value_info[:]
    try:
        onnx.checker.check_model(_opaque_set_apart(result, opaque), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise DowngradeError(f"the model at opset {target} is not valid: {exc}") from exc
    return result


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` (or of a subgraph) reads, and the graph's outputs."""
    names = {output.name for output in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for subgraph in (attribute.g, *attribute.graphs):
                names.update(_read_names(subgraph))
    return names


def _drop_orphaned_initializers(graph: onnx.GraphProto, read_before: set[str]) -> None:
    """Initializers the conversion stopped reading (axes moved into attributes): ONNX Runtime
    warns about each one and ATC carries them as dead weights. Ones nothing read before stay."""
    read_now = _read_names(graph)
    kept = [init for init in graph.initializer
            if init.name in read_now or init.name not in read_before]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _opaque_set_apart(model: onnx.ModelProto, opaque: Collection[str]) -> onnx.ModelProto:
    """A copy whose ``opaque`` nodes sit in a domain of their own, which the checker passes."""
    if not opaque:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in _default_domain_nodes(copy.graph):
        if node.op_type in opaque:
            node.domain = _OPAQUE_DOMAIN
    copy.opset_import.append(helper.make_opsetid(_OPAQUE_DOMAIN, 1))
    return copy


def _downgrade_node(
    node: onnx.NodeProto,
    source: int,
    target: int,
    constants: dict[str, np.ndarray],
    shapes: dict[str, list[int | None]],
    new_initializers: list[onnx.TensorProto],
) -> None:
    label = f"node '{node.name or node.output[0]}' ({node.op_type})"
    try:
        old = onnx.defs.get_schema(node.op_type, source)
        new = onnx.defs.get_schema(node.op_type, target)
    except onnx.defs.SchemaError as exc:
        raise DowngradeError(f"{label} does not exist at opset {target}") from exc
    if old.since_version == new.since_version:
        return
    if node.op_type in _LAST_AXIS_ONLY and old.since_version >= 13 > new.since_version:
        axis = _attr(node, "axis", -1)
        rank = len(shapes[node.input[0]]) if node.input[0] in shapes else None
        if not (axis == -1 or (rank is not None and axis == rank - 1)):
            raise DowngradeError(f"{label} reduces axis {axis}; before opset 13 that meant "
                                 "flattening the trailing axes")
    if node.op_type == "Split" and any(a.name == "num_outputs" for a in node.attribute):
        _split_num_outputs(node, shapes, new_initializers, label)
    _ADAPTERS.get(node.op_type, _no_adapter)(node, constants, new_initializers)
    constants.update({init.name: numpy_helper.to_array(init) for init in new_initializers})
    variadic = bool(new.inputs) and (
        new.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    )
    if not variadic:
        for index, name in list(enumerate(node.input))[len(new.inputs) :]:
            if not name:
                continue
            attr_name = _INPUT_TO_ATTRIBUTE.get((node.op_type, index))
            if attr_name is None or name not in constants:
                raise DowngradeError(
                    f"{label} uses input {index}, which opset {target} does not have"
                    + ("" if attr_name is None else " (and it is not a constant)")
                )
            node.attribute.append(helper.make_attribute(attr_name, constants[name].tolist()))
        del node.input[len(new.inputs) :]
    _trim_trailing_empty_inputs(node)
    for attr in list(node.attribute):
        if attr.name in new.attributes:
            continue
        allowed = _DROPPABLE.get((node.op_type, attr.name))
        value = helper.get_attribute_value(attr)
        value = value.decode() if isinstance(value, bytes) else value
        keeps_meaning = allowed is _ANY or value == allowed or (
            allowed == "ones" and all(v == 1 for v in value)
        ) or _allowzero_without_zeros(node, attr.name, constants)
        if not keeps_meaning:
            raise DowngradeError(f"{label} sets {attr.name}={value!r}, which opset {target} "
                                 "cannot express")
        node.attribute.remove(attr)


def _split_num_outputs(
    node: onnx.NodeProto,
    shapes: dict[str, list[int | None]],
    new_initializers: list[onnx.TensorProto],
    label: str,
) -> None:
    """Split-18's ``num_outputs`` -> explicit sizes, by ONNX's rule: ceil(d/n) each, the rest last.

    The sizes go in as the ``split`` input (opset 13-17 form); the generic step below moves them
    into the attribute for older targets.
    """
    count = next(a.i for a in node.attribute if a.name == "num_outputs")
    shape = shapes.get(node.input[0])
    axis = _attr(node, "axis", 0)
    size = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
    if size is None:
        raise DowngradeError(f"{label} splits a dimension of unknown size into {count}")
    chunk = -(-size // count)
    sizes = np.array([chunk] * (count - 1) + [size - chunk * (count - 1)], np.int64)
    name = f"{node.name or node.output[0]}_split_sizes"
    new_initializers.append(numpy_helper.from_array(sizes, name))
    del node.input[1:]
    node.input.append(name)
    node.attribute.remove(next(a for a in node.attribute if a.name == "num_outputs"))


def _allowzero_without_zeros(node: onnx.NodeProto, attr_name: str, constants) -> bool:
    """Reshape's ``allowzero`` (14) only changes what a 0 in the shape means: none, no change."""
    if (node.op_type, attr_name) != ("Reshape", "allowzero") or len(node.input) < 2:
        return False
    shape = constants.get(node.input[1])
    return shape is not None and not (shape == 0).any()


def _no_adapter(node: onnx.NodeProto, constants, new_initializers) -> None:
    """Most ops need nothing beyond the generic input and attribute checks."""


def _resize(node: onnx.NodeProto, constants, new_initializers: list[onnx.TensorProto]) -> None:
    """Resize-11/10 require ``roi`` and ``scales`` inputs that 13 made optional: give empties."""
    inputs = list(node.input) + [""] * (4 - len(node.input))
    for index in (1, 2):
        if not inputs[index] and any(inputs[index + 1 :]):
            name = f"{node.name or node.output[0]}_empty_{'roi' if index == 1 else 'scales'}"
            new_initializers.append(numpy_helper.from_array(np.zeros(0, np.float32), name))
            inputs[index] = name
    del node.input[:]
    node.input.extend(inputs)
    _trim_trailing_empty_inputs(node)


def _dropout(node: onnx.NodeProto, constants, new_initializers) -> None:
    """Dropout-12 made ``ratio`` an input; before, an attribute. Training mode cannot go back."""
    inputs = list(node.input)
    training = inputs[2] if len(inputs) > 2 else ""
    if training and not (training in constants and not bool(constants[training])):
        raise DowngradeError(f"Dropout '{node.name}' may run in training mode")
    ratio = inputs[1] if len(inputs) > 1 else ""
    if ratio:
        if ratio not in constants:
            raise DowngradeError(f"Dropout '{node.name}' has a computed ratio")
        node.attribute.append(helper.make_attribute("ratio", float(constants[ratio])))
    del node.input[1:]


_ADAPTERS: dict[str, Callable[[onnx.NodeProto, dict, list], None]] = {
    "Resize": _resize,
    "Dropout": _dropout,
}


def _trim_trailing_empty_inputs(node: onnx.NodeProto) -> None:
    while node.input and not node.input[-1]:
        del node.input[-1]


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return attr.i
    return default


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _default_domain_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    return (node for node in all_nodes(graph) if node.domain in ("", "ai.onnx"))


def _shapes(graph: onnx.GraphProto) -> dict[str, list[int | None]]:
    """Inferred shapes by value name; an unknown dimension is None."""
    shapes = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor_type = value.type.tensor_type
        if tensor_type.HasField("shape"):
            shapes[value.name] = [
                d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim
            ]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes
