"""Which inputs and outputs of a node may hold float16, read from the op's ONNX schema.

Why the schema and not a list of ops: ONNX says per type parameter which element types an op
accepts. A slot whose type parameter lists no float16 (Range's T, NonMaxSuppression's boxes,
Resize's scales) must stay float32 whatever the rest of the node does, and an output whose type
parameter is bound to no input (ConstantOfShape, RandomNormal) takes its dtype from an attribute,
which a dtype conversion cannot see. Getting this from the schema covers every standard op at the
model's opset, including ones nobody thought to list.
"""

from __future__ import annotations

import dataclasses
import functools

import onnx
import onnx.defs
import onnx_ir as ir

_FP16 = "tensor(float16)"


@dataclasses.dataclass(frozen=True)
class Slots:
    """Per node: the float32 slots that may become float16, and why the others may not."""

    inputs: frozenset[int]
    outputs: frozenset[int]
    blocked: str | None = None  # why the node as a whole cannot run in float16


def fp16_slots(node: ir.Node, opset: int) -> Slots:
    """The float32 inputs/outputs of ``node`` that can be float16 in a float16 node.

    Slots are grouped by type parameter: all slots bound to one parameter switch together, so a
    parameter is switched only when its schema allows float16. Returns ``blocked`` when a float32
    output cannot be switched (its dtype would disagree with the float16 inputs it is computed
    from) or when the node has no schema.
    """
    unknown = [v.name for v in (*node.inputs, *node.outputs) if v is not None and v.dtype is None]
    if unknown:
        return Slots(frozenset(), frozenset(), f"the dtype of '{unknown[0]}' is unknown")
    if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
        return _cast_slots(node)
    schema = _schema(node.op_type, opset, node.domain)
    if schema is None:
        return Slots(frozenset(), frozenset(), f"no ONNX schema for {_op_name(node)}")
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
           for a in node.attributes.values()):
        return Slots(frozenset(), frozenset(), "control flow: its subgraphs are not converted")
    params_of_inputs = [_param(schema.inputs, i) for i in range(len(node.inputs))]
    params_of_outputs = [_param(schema.outputs, i) for i in range(len(node.outputs))]
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    input_params = set(params_of_inputs)

    def switchable(param: str | None) -> bool:
        return param is not None and _FP16 in allowed.get(param, {param})

    inputs = frozenset(
        i for i, value in enumerate(node.inputs)
        if _is_float32(value) and switchable(params_of_inputs[i])
    )
    outputs = set()
    for i, value in enumerate(node.outputs):
        if not _is_float32(value):
            continue
        param = params_of_outputs[i]
        if not switchable(param):
            return Slots(
                frozenset(), frozenset(),
                f"the {_op_name(node)} schema allows no float16 for output '{value.name}'",
            )
        if param not in input_params:
            return Slots(
                frozenset(), frozenset(),
                f"output '{value.name}' takes its dtype from an attribute, not from the inputs",
            )
        outputs.add(i)
    return Slots(inputs, frozenset(outputs))


def _cast_slots(node: ir.Node) -> Slots:
    """Cast may read float16 always; its output follows ``to`` (rewritten from FLOAT to FLOAT16)."""
    inputs = frozenset(i for i, v in enumerate(node.inputs) if _is_float32(v))
    to = node.attributes.get("to")
    outputs = frozenset({0}) if to is not None and to.value == ir.DataType.FLOAT else frozenset()
    return Slots(inputs, outputs)


def _param(formals, index: int) -> str | None:
    """The type parameter (or literal type) of the ``index``-th actual slot, variadics included."""
    if not formals:
        return None
    if index >= len(formals):
        last = formals[-1]
        if last.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
            return None
        return last.type_str
    return formals[index].type_str


def _is_float32(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == ir.DataType.FLOAT


def _op_name(node: ir.Node) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


@functools.cache
def _schema(op_type: str, opset: int, domain: str) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "" if domain == "ai.onnx" else domain)
    except onnx.defs.SchemaError:
        return None


def is_float_node(node: ir.Node) -> bool:
    """A node that reads or writes float32 (or an unknown dtype): the nodes a conversion touches."""
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    return any(_is_float32(v) or v.dtype is None for v in values)

