"""Respell the few ops onnxscript's constant folder writes in their newest form, for older opsets.

Why: the folder's partial evaluators build their replacements with the newest op signatures
whatever the model's opset (checked against onnxscript 0.7): ``Split(num_outputs=n)`` is opset 18,
``Split(x, split)`` and ``Squeeze/Unsqueeze(x, axes)`` with inputs are opset 13. In an opset-11..17
model those nodes are invalid (ONNX Runtime: INVALID_GRAPH). Its ``should_fold`` hook does not
reach the partial evaluators, so convert respells afterwards:

  Split(x, axis=a, num_outputs=n)   -> Split(x, sizes) (opset 13..17) or Split(x, split=sizes) (<13)
      sizes = [ceil(d/n)] * (n-1) + [d - (n-1)*ceil(d/n)], d = x.shape[a]  (ONNX's own rule)
  Split(x, split_const)             -> Split(x, split=split_const)                          (<13)
  Squeeze/Unsqueeze(x, axes_const)  -> Squeeze/Unsqueeze(x, axes=axes_const)                (<13)

A node that cannot be respelled (the size or the axes are not known constants) is left as it is;
the final ONNX checker then names it.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

_AXES_AS_INPUT = 13  # Split's `split`, Squeeze's and Unsqueeze's `axes` became inputs here
_NUM_OUTPUTS = 18  # Split's `num_outputs` attribute was added here


def respell_for_opset(model: ir.Model) -> int:
    """Rewrite too-new spellings in place; returns how many nodes changed."""
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is None or opset >= _NUM_OUTPUTS:
        return 0
    changed = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Split" and "num_outputs" in node.attributes:
            changed += _split_sizes_from_num_outputs(node, opset)
        elif opset < _AXES_AS_INPUT and node.op_type == "Split":
            changed += _input_to_attribute(node, "split")
        elif opset < _AXES_AS_INPUT and node.op_type in ("Squeeze", "Unsqueeze"):
            changed += _input_to_attribute(node, "axes")
    return changed


def _split_sizes_from_num_outputs(node: ir.Node, opset: int) -> int:
    source = node.inputs[0]
    axis = node.attributes.get_int("axis", 0)
    if source is None or source.shape is None:
        return 0
    rank = len(source.shape)
    size = source.shape[axis + rank if axis < 0 else axis]
    if not isinstance(size, int):
        return 0
    count = node.attributes.get_int("num_outputs")
    chunk = math.ceil(size / count)
    sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
    node.attributes.pop("num_outputs")
    if opset < _AXES_AS_INPUT:
        node.attributes["split"] = ir.AttrInt64s("split", sizes)
        return 1
    graph = node.graph
    if graph is None:
        return 0
    value = ir.Value(
        name=f"{node.name or 'split'}_sizes", const_value=ir.tensor(np.array(sizes, np.int64))
    )
    graph.register_initializer(value)
    node.resize_inputs(2)
    node.replace_input_with(1, value)
    return 1


def _input_to_attribute(node: ir.Node, name: str) -> int:
    if len(node.inputs) < 2 or node.inputs[1] is None or node.inputs[1].const_value is None:
        return 0
    values = node.inputs[1].const_value.numpy().reshape(-1).tolist()
    node.resize_inputs(1)
    node.attributes[name] = ir.AttrInt64s(name, [int(v) for v in values])
    return 1
