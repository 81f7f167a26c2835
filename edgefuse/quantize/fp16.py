"""FP32 -> FP16 conversion over onnx-ir, with FP32 islands and no cancelling Cast pairs.

Why not onnxconverter-common or ONNX Runtime's float16.py: both clamp out-of-range constants
silently, onnxconverter-common 1.16 fails on real exports (duplicated value_info, Cast pairs ending
at graph outputs), and neither tells which node it kept in FP32 and why. This converter is small
enough to own:

1. Every node that reads or writes float32 is FP16 unless it is in ``keep`` (the policy, the
   user's list, the search). In an FP16 node the float32 slots whose ONNX type parameter allows
   float16 switch (``_slots``), except pinned coordinates (Resize's roi/scales).
2. A float32 constant read by an FP16 slot is converted once (in place if no FP32 slot reads it,
   else as a ``<name>.fp16`` copy), unless it does not fit FP16 (``constants.fp16_misfit``): then
   the node that reads it joins ``keep`` and the plan is redone.
3. Each float value is stored in exactly one dtype (its producer's). A consumer that needs the
   other dtype reads it through one shared Cast, inserted before its first consumer. Hence no
   Cast pair that cancels: a cast exists only where a producer and a consumer disagree.
4. Graph inputs/outputs are FP16, or FP32 with ``keep_io_types`` (a Cast at the boundary; graph
   output names never change, the value inside is renamed ``<name>.fp16``).

Node names are kept, and every value keeps its name (inserted Casts write ``<name>.fp16`` or
``<name>.fp32``), so per-layer comparison against the FP32 model matches tensors by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import onnx_ir as ir
import onnx_ir.passes.common as ir_passes

from edgefuse.errors import InputError, Ref
from edgefuse.optimize.passes import RemoveUnused
from edgefuse.quantize._slots import Slots, fp16_slots, is_float_node
from edgefuse.quantize.constants import fp16_misfit
from edgefuse.quantize.policy import PINNED_FP32_INPUTS, Decision

FLOAT, FLOAT16 = ir.DataType.FLOAT, ir.DataType.FLOAT16


@dataclasses.dataclass
class Conversion:
    """What the conversion did, for the report."""

    fp16_nodes: int
    fp32_nodes: list[str]
    casts_inserted: int
    constants_converted: int
    constant_decisions: dict[str, Decision]


def check_float32_model(model: ir.Model) -> None:
    """Raise when ``model`` is not a float32 model (already FP16, or float64/bfloat16)."""
    found: dict[ir.DataType, list[str]] = {}
    values = [*model.graph.inputs, *model.graph.initializers.values()]
    values += [o for node in model.graph for o in node.outputs]
    for value in values:
        if value.dtype is not None and value.dtype.is_floating_point() and value.dtype != FLOAT:
            found.setdefault(value.dtype, []).append(value.name)
    if FLOAT16 in found:
        raise InputError(
            f"the model already holds float16 tensors ({len(found[FLOAT16])}, e.g. "
            f"'{found[FLOAT16][0]}'): quantize converts float32 models",
            hint="pass the float32 model the FP16 one was made from",
            reference=Ref.ALREADY_FP16,
        )
    if found:
        dtype, names = next(iter(found.items()))
        raise InputError(
            f"the model holds {dtype.name.lower()} tensors (e.g. '{names[0]}'); quantize "
            "converts float32 models",
            hint="export the model in float32 (model.float() in PyTorch)",
            reference=Ref.NOT_FP32_MODEL,
        )
    if not any(v.dtype == FLOAT for v in values):
        raise InputError(
            "the model has no float32 tensor to convert",
            reference=Ref.NOT_FP32_MODEL,
        )


def convert_fp16(
    model: ir.Model, keep: Collection[str], *, keep_io_types: bool
) -> Conversion:
    """Convert ``model`` in place; nodes named in ``keep`` (and those whose constants do not fit
    FP16) stay FP32."""
    ir_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    if any(v.dtype is None for node in model.graph for v in node.outputs if v is not None):
        ir_passes.ShapeInferencePass()(model)  # the plan needs every value's dtype
    opset = model.opset_imports.get("", 17)
    graph = model.graph
    casts_before = _count_casts(graph)
    kept = set(keep)
    constant_decisions: dict[str, Decision] = {}
    while True:
        plan = _plan(graph, kept, opset)
        misfits = _constant_misfits(plan)
        if not misfits:
            break
        constant_decisions.update(misfits)
        kept.update(misfits)
    fp16_values = {node.outputs[i] for node, slots in plan.items() for i in slots.outputs}
    if not keep_io_types:
        fp16_values.update(v for v in graph.inputs if v.dtype == FLOAT)
    rewriter = _Rewriter(graph, plan)
    rewriter.rewrite_inputs(fp16_values)
    rewriter.rewrite_outputs(fp16_values, want_fp16=not keep_io_types)
    for value in fp16_values:
        _retype(value, FLOAT16)
    for node, slots in plan.items():
        if node.op_type == "Cast" and slots.outputs:
            node.attributes["to"] = ir.AttrInt64("to", FLOAT16)
    remove_cancelling_casts(graph)
    RemoveUnused()(model)
    kept_float = [n.name for n in graph if n not in plan and is_float_node(n) and n.name in kept]
    return Conversion(
        fp16_nodes=len(plan),
        fp32_nodes=kept_float,
        casts_inserted=_count_casts(graph) - casts_before,
        constants_converted=rewriter.constants,
        constant_decisions=constant_decisions,
    )


def _plan(graph: ir.Graph, kept: set[str], opset: int) -> dict[ir.Node, Slots]:
    plan = {}
    for node in graph:
        if node.name in kept or not is_float_node(node):
            continue
        slots = fp16_slots(node, opset)
        if slots.blocked is not None:
            continue
        pinned = PINNED_FP32_INPUTS.get(node.op_type, {}) if node.domain in ("", "ai.onnx") else {}
        plan[node] = Slots(slots.inputs - set(pinned), slots.outputs)
    return plan


def _constant_misfits(plan: dict[ir.Node, Slots]) -> dict[str, Decision]:
    misfits: dict[str, Decision] = {}
    checked: dict[ir.Value, tuple[str, str] | None] = {}
    for node, slots in plan.items():
        for index in sorted(slots.inputs):
            value = node.inputs[index]
            if not _is_constant(value):
                continue
            if value not in checked:
                checked[value] = fp16_misfit(value.const_value.numpy())
            problem = checked[value]
            if problem is not None and node.name not in misfits:
                cause, why = problem
                misfits[node.name] = Decision(
                    node.name, node.op_type, cause, f"constant '{value.name}': {why}"
                )
    return misfits


def _is_constant(value: ir.Value | None) -> bool:
    return (
        value is not None
        and value.is_initializer()
        and not value.is_graph_input()
        and value.const_value is not None
    )


class _Rewriter:
    """Inserts the Casts and FP16 constant copies the plan needs."""

    def __init__(self, graph: ir.Graph, plan: dict[ir.Node, Slots]) -> None:
        self.graph = graph
        self.plan = plan
        self.constants = 0
        self._cast_of: dict[tuple[ir.Value, ir.DataType], ir.Value] = {}
        self._fp16_copy: dict[ir.Value, ir.Value] = {}
        self._names = {v.name for v in _all_values(graph)} | {n.name for n in graph}

    def rewrite_inputs(self, fp16_values: set[ir.Value]) -> None:
        for node in list(self.graph):
            slots = self.plan.get(node)
            for index, value in enumerate(node.inputs):
                if value is None or value.dtype != FLOAT:
                    continue
                want_fp16 = slots is not None and index in slots.inputs
                if _is_constant(value):
                    if want_fp16:
                        node.replace_input_with(index, self._constant_fp16(value))
                    continue
                if want_fp16 != (value in fp16_values):
                    target = FLOAT16 if want_fp16 else FLOAT
                    node.replace_input_with(index, self._cast(value, target, before=node))

    def rewrite_outputs(self, fp16_values: set[ir.Value], *, want_fp16: bool) -> None:
        outputs = self.graph.outputs
        for position, value in enumerate(list(outputs)):
            if value.dtype != FLOAT or (value in fp16_values) == want_fp16:
                continue
            if value.is_graph_input() or _is_constant(value):
                continue  # a graph input or constant passed straight through keeps its dtype
            name = value.name
            value.name = self._unique(f"{name}.{'fp32' if want_fp16 else 'fp16'}")
            target = FLOAT16 if want_fp16 else FLOAT
            cast = self._make_cast(value, target, name)
            self.graph.append(cast)
            outputs[position] = cast.outputs[0]

    def _cast(self, value: ir.Value, target: ir.DataType, *, before: ir.Node) -> ir.Value:
        key = (value, target)
        if key not in self._cast_of:
            suffix = "fp16" if target == FLOAT16 else "fp32"
            cast = self._make_cast(value, target, self._unique(f"{value.name}.{suffix}"))
            self.graph.insert_before(before, cast)
            self._cast_of[key] = cast.outputs[0]
        return self._cast_of[key]

    def _make_cast(self, value: ir.Value, target: ir.DataType, out_name: str) -> ir.Node:
        output = ir.Value(name=out_name, shape=value.shape, type=ir.TensorType(target))
        return ir.Node(
            "", "Cast", [value], [ir.AttrInt64("to", target)], outputs=[output],
            name=self._unique(f"{out_name}.cast"),
        )

    def _constant_fp16(self, value: ir.Value) -> ir.Value:
        if value in self._fp16_copy:
            return self._fp16_copy[value]
        array = value.const_value.numpy().astype("float16")
        self.constants += 1
        if all(self._reads_fp16(node, index) for node, index in value.uses()) and not (
            value.is_graph_output()
        ):
            value.const_value = ir.tensor(array, name=value.name)
            _retype(value, FLOAT16)
            copy = value
        else:
            copy = ir.Value(
                name=self._unique(f"{value.name}.fp16"), shape=value.shape,
                type=ir.TensorType(FLOAT16),
            )
            copy.const_value = ir.tensor(array, name=copy.name)
            self.graph.register_initializer(copy)
        self._fp16_copy[value] = copy
        return copy

    def _reads_fp16(self, node: ir.Node, index: int) -> bool:
        slots = self.plan.get(node)
        return slots is not None and index in slots.inputs

    def _unique(self, name: str) -> str:
        candidate, counter = name, 1
        while candidate in self._names:
            counter += 1
            candidate = f"{name}.{counter}"
        self._names.add(candidate)
        return candidate


def _all_values(graph: ir.Graph):
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from (v for v in node.outputs if v is not None)


def cancelling_cast_pairs(graph: ir.Graph) -> list[tuple[ir.Node, ir.Node]]:
    """Cast(a->b) -> Cast(b->a) pairs where the round trip is lossless (b wider than a)."""
    pairs = []
    for second in graph:
        if second.op_type != "Cast" or second.inputs[0] is None:
            continue
        first = second.inputs[0].producer()
        if first is None or first.op_type != "Cast" or first.inputs[0] is None:
            continue
        source, middle = first.inputs[0].dtype, first.outputs[0].dtype
        if second.outputs[0].dtype == source and _widens(source, middle):
            pairs.append((first, second))
    return pairs


def remove_cancelling_casts(graph: ir.Graph) -> None:
    """Bypass each lossless Cast round trip (the dead Casts go with the next unused-node pass)."""
    for first, second in cancelling_cast_pairs(graph):
        out = second.outputs[0]
        if not out.is_graph_output():
            out.replace_all_uses_with(first.inputs[0])


def _count_casts(graph: ir.Graph) -> int:
    return sum(1 for node in graph if node.op_type == "Cast")


def _widens(narrow: ir.DataType | None, wide: ir.DataType | None) -> bool:
    order = {FLOAT16: 1, FLOAT: 2, ir.DataType.DOUBLE: 3}
    return narrow in order and wide in order and order[wide] > order[narrow]


def _retype(value: ir.Value, dtype: ir.DataType) -> None:
    """Give ``value`` a new tensor type of ``dtype``, keeping its shape.

    Why not ``value.dtype = dtype``: onnx-ir's setter changes the value's TensorType in place, and
    ``ir.Model.clone()`` shares TensorType objects between the clone and the original, so the
    FP16 search (a fresh clone of the FP32 model per evaluation) would retype the FP32 model too.
    """
    value.type = ir.TensorType(dtype)
