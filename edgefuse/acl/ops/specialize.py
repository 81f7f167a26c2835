"""One node's decomposition with its attributes rendered in: constants only, folded in Python.

Why: a decomposition is an ONNX function whose body reads the node's attributes through
references (``Constant <value_int: int = @max_per_class> ()``) and may compute with them
(YoloHead's per-class limit is ``max_per_class or max_detections``). ONNX Runtime evaluates that
at run time, but ATC's parser wants some inputs as constants: NonMaxSuppression's
``max_output_boxes_per_class``, ``iou_threshold`` and ``score_threshold`` must be initializers or
Constant nodes (hiascend canncommercial/900 API/aolapi/atlasoxol_09_0106.html, restriction
``nms-constant-thresholds`` of edgefuse's op-support table). So the decomposition a model gets
for ``compile --no-custom-ops`` (and for every host runner, so that both see the same graph) is
rendered per node:

- every attribute reference is replaced by the node's value;
- every ``Constant`` is written as a ``value`` tensor (``value_int`` -> int64 scalar,
  ``value_float`` -> float32 scalar, ...), the one form every ONNX parser takes;
- every node whose inputs are all constants is evaluated here, with ONNX's reference
  implementation, and replaced by a ``Constant`` holding its result; constants nothing reads
  any more are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx.reference

from edgefuse.acl.ops.spec import OpSpec

_VALUE_ATTRIBUTES = {
    "value_int": lambda v: np.array(v, np.int64),
    "value_ints": lambda v: np.array(list(v), np.int64),
    "value_float": lambda v: np.array(v, np.float32),
    "value_floats": lambda v: np.array(list(v), np.float32),
}


def specialized_function(
    spec: OpSpec, attributes: Mapping[str, Any], opset: int, name: str
) -> onnx.FunctionProto:
    """``spec``'s decomposition for one node (resolved ``attributes``), as function ``name``."""
    function = spec.function_proto(opset)
    values = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in spec.resolve_attributes(attributes).items()
    }
    constants: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []
    for node in function.node:
        rendered = _with_attributes(node, values)
        if rendered.op_type == "Constant" and rendered.domain in ("", "ai.onnx"):
            array = _constant_value(rendered)
        elif rendered.input and all(i in constants for i in rendered.input if i):
            array = _evaluate(rendered, constants, opset)
        else:
            nodes.append(rendered)
            continue
        constants[rendered.output[0]] = array
        nodes.append(_constant_node(rendered.output[0], array))
    used = {i for node in nodes for i in node.input} | set(function.output)
    kept = [n for n in nodes if n.op_type != "Constant" or n.output[0] in used]
    return onnx.helper.make_function(
        function.domain, name, list(function.input), list(function.output), kept,
        list(function.opset_import),
    )


def _with_attributes(node: onnx.NodeProto, values: Mapping[str, Any]) -> onnx.NodeProto:
    """A copy of ``node`` whose attribute references hold the node's values."""
    rendered = onnx.NodeProto()
    rendered.CopyFrom(node)
    del rendered.attribute[:]
    for attribute in node.attribute:
        if attribute.ref_attr_name:
            rendered.attribute.append(
                onnx.helper.make_attribute(attribute.name, values[attribute.ref_attr_name])
            )
        else:
            rendered.attribute.append(attribute)
    return rendered


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    (attribute,) = node.attribute
    if attribute.name == "value":
        return onnx.numpy_helper.to_array(attribute.t)
    convert = _VALUE_ATTRIBUTES.get(attribute.name)
    if convert is None:
        raise ValueError(f"a decomposition's Constant with '{attribute.name}' is not rendered")
    return convert(onnx.helper.get_attribute_value(attribute))


def _evaluate(
    node: onnx.NodeProto, constants: Mapping[str, np.ndarray], opset: int
) -> np.ndarray:
    if len(node.output) != 1:
        raise ValueError(f"a constant {node.op_type} with {len(node.output)} outputs")
    inputs = [onnx.helper.make_tensor_value_info(i, onnx.helper.np_dtype_to_tensor_dtype(
        constants[i].dtype), constants[i].shape) for i in node.input if i]
    graph = onnx.helper.make_graph(
        [node], "fold", inputs, [onnx.helper.make_empty_tensor_value_info(node.output[0])]
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    (result,) = onnx.reference.ReferenceEvaluator(model).run(
        None, {i: constants[i] for i in node.input if i}
    )
    return np.asarray(result)


def _constant_node(name: str, array: np.ndarray) -> onnx.NodeProto:
    return onnx.helper.make_node(
        "Constant", [], [name], value=onnx.numpy_helper.from_array(array, name)
    )
