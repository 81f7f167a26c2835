"""Which nodes of the model each kernel ONNX Runtime executed stands for.

Why: ONNX Runtime rewrites the graph before it runs it (Conv+BatchNorm+Relu become one
``FusedConv``; on the CPU, Convs become NCHWc kernels with ``ReorderInput``/``ReorderOutput``
around them) and names the new nodes as it likes, so a profile's node names are often not the
model's. What survives: a node ONNX Runtime fuses into keeps its name, an NCHWc kernel is named
after the model tensor it computes (``<tensor>_nchwc``), and a value that still exists keeps its
tensor name. Each kernel *claims* the model tensors it computes (by those rules, in that order);
its *segment* is then the model nodes from those tensors back to the tensors other kernels claim
or the graph's inputs and weights (its *cone*): a FusedConv that claims the Relu's output
stands for the Relu, the BatchNorm and the Conv. Kernels that claim nothing (ReorderInput,
ReorderOutput, device copies) are rows of their own: their time is real, their origin is the
runtime's.

The bytes a segment moves are those of its cone's boundary (what it reads from outside, what it
writes for outside); its FLOPs are the sum of its cone's nodes. Model nodes no segment covers
were folded away by ONNX Runtime (constants, identities): they cost nothing at run time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnx

from edgefuse.optimize.provenance import node_key
from edgefuse.profile.cost import NodeCost, TensorInfo, node_cost

# Suffixes runtimes add to the name of the tensor a kernel computes: ONNX Runtime's NCHWc
# transformer names its Conv ``<tensor>_nchwc``; the sim's FP16 emulation (reference/fp16.py)
# renames a raw op output ``<tensor>.unrounded`` before rounding it into ``<tensor>``.
_DERIVED_SUFFIXES = ("_nchwc", ".unrounded")
# Ops ONNX Runtime folds into the kernel before them (Conv's activation and residual Sum).
_EPILOGUES = frozenset({"Add", "Sum", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
                        "Tanh", "HardSwish"})


@dataclasses.dataclass
class Segment:
    """Kernels that ran as one unit, and the model nodes they stand for."""

    kernels: list[str]  # names as the profiler reports them, in execution order
    origins: list[str]  # model node keys, in graph order
    flops: int | None
    bytes: int
    unit: str  # "cube" when any origin runs on the matrix unit, else "vector"
    op_type: str  # the origin that does the most work, else the first kernel's op


@dataclasses.dataclass(frozen=True)
class ModelNode:
    key: str
    op_type: str
    node: onnx.NodeProto
    cost: NodeCost


def model_nodes(model: onnx.ModelProto, infos: Mapping[str, TensorInfo]) -> list[ModelNode]:
    """The main graph's nodes with their keys and costs, in graph order."""
    return [ModelNode(node_key(n.name, n.op_type, n.output[0] if n.output else ""), n.op_type, n,
                      node_cost(n, infos)) for n in model.graph.node]


def segments(
    model: onnx.ModelProto,
    nodes: Sequence[ModelNode],
    infos: Mapping[str, TensorInfo],
    executed: onnx.ModelProto | None,
    kernel_order: Sequence[str],
    kernel_ops: Mapping[str, str],
) -> list[Segment]:
    """One segment per kernel in ``kernel_order`` (the profile's execution order).

    ``executed`` is the graph ONNX Runtime ran (saved next to the profile); without it a kernel
    maps to the model node of its own name only.
    """
    by_key = {node.key: node for node in nodes}
    producer = {out: node for node in nodes for out in node.node.output if out}
    claims = _claims(model, executed, kernel_order, by_key, producer)
    _extend_epilogues(claims, nodes, kernel_order)
    given = {value.name for value in model.graph.input}
    given |= {init.name for init in model.graph.initializer}
    owner = {name: kernel for kernel, names in claims.items() for name in names}
    found = []
    for kernel in kernel_order:
        stop = given | {name for name, other in owner.items() if other != kernel}
        cone = _cone(claims.get(kernel, []), producer, stop)
        found.append(_segment([kernel], cone, nodes, infos, model, kernel_ops))
    return found


def _base_tensor(kernel: str) -> str:
    """The tensor a kernel is named after, derived-name suffixes stripped."""
    name, stripped = kernel, True
    while stripped:
        stripped = False
        for suffix in _DERIVED_SUFFIXES:
            if name.endswith(suffix):
                name, stripped = name[: -len(suffix)], True
    return name


def _extend_epilogues(claims: dict[str, list[str]], nodes: Sequence[ModelNode],
                      kernel_order: Sequence[str]) -> None:
    """Give an unclaimed elementwise node to the kernel that computes its last input.

    ONNX Runtime fuses a residual Add and the activation after it into the Conv that computes
    the Add's later input (the NCHWc Conv's ``Sum`` input, FusedConv's activation) and may name
    that kernel after the Conv's own output; the nodes it absorbed downstream then belong to it,
    not to the next kernel that reads their result.
    """
    position = {kernel: index for index, kernel in enumerate(kernel_order)}
    owner = {name: kernel for kernel, names in claims.items() for name in names}
    for node in nodes:
        outputs = [out for out in node.node.output if out]
        if node.op_type not in _EPILOGUES or not outputs or any(o in owner for o in outputs):
            continue
        owners = [owner[name] for name in node.node.input if name in owner]
        if not owners:
            continue
        latest = max(owners, key=lambda kernel: position[kernel])
        claims[latest].extend(outputs)
        owner.update(dict.fromkeys(outputs, latest))


def _claims(model: onnx.ModelProto, executed: onnx.ModelProto | None,
            kernel_order: Sequence[str], by_key: Mapping[str, ModelNode],
            producer: Mapping[str, ModelNode]) -> dict[str, list[str]]:
    """Kernel -> the model tensors it produces: by its name first (ONNX Runtime keeps a node's
    name when it fuses into it, and names an NCHWc kernel after the tensor it computes, with
    ``_nchwc``), then by the model tensors it writes, where no kernel claimed them by name."""
    claims: dict[str, list[str]] = {}
    for kernel in kernel_order:
        if kernel in by_key:
            claims[kernel] = [out for out in by_key[kernel].node.output if out]
        elif (tensor := _base_tensor(kernel)) in producer:
            claims[kernel] = [tensor]
    if executed is None:
        return claims
    taken = {name for names in claims.values() for name in names}
    written = {node.name: list(node.output) for node in executed.graph.node}
    for kernel in kernel_order:
        if kernel in claims:
            continue
        mine = [out for out in written.get(kernel, ()) if out in producer and out not in taken]
        if mine:
            claims[kernel] = mine
            taken.update(mine)
    return claims


def _cone(outputs: Sequence[str], producer: Mapping[str, ModelNode],
          stop: set[str]) -> list[ModelNode]:
    """The model nodes from ``outputs`` back to tensors in ``stop`` (inputs, weights, and what
    other kernels compute)."""
    cone: dict[str, ModelNode] = {}
    stack = [producer[name] for name in outputs if name in producer]
    while stack:
        node = stack.pop()
        if node.key in cone:
            continue
        cone[node.key] = node
        for name in node.node.input:
            if name and name not in stop and name in producer:
                stack.append(producer[name])
    return list(cone.values())


def _segment(kernels: list[str], cone: list[ModelNode], nodes: Sequence[ModelNode],
             infos: Mapping[str, TensorInfo], model: onnx.ModelProto,
             kernel_ops: Mapping[str, str]) -> Segment:
    order = {node.key: i for i, node in enumerate(nodes)}
    cone.sort(key=lambda node: order[node.key])
    flops = [node.cost.flops for node in cone]
    total_flops = None if any(f is None for f in flops) else sum(flops)  # type: ignore[arg-type]
    unit = "cube" if any(node.cost.unit == "cube" for node in cone) else "vector"
    main = max(cone, key=lambda node: (node.cost.unit == "cube", node.cost.flops or 0),
               default=None)
    op_type = main.op_type if main is not None else kernel_ops.get(kernels[0], "?")
    return Segment(kernels, [node.key for node in cone], total_flops,
                   _boundary_bytes(cone, infos, model, nodes), unit, op_type)


def _boundary_bytes(cone: Sequence[ModelNode], infos: Mapping[str, TensorInfo],
                    model: onnx.ModelProto, nodes: Sequence[ModelNode]) -> int:
    """Bytes the cone reads from outside itself plus bytes it writes for outside."""
    if len(cone) == 1:
        return cone[0].cost.bytes
    made = {out for node in cone for out in node.node.output if out}
    read = {name for node in cone for name in node.node.input if name and name not in made}
    inside = {node.key for node in cone}
    used_outside = {name for node in nodes if node.key not in inside
                    for name in node.node.input} | {value.name for value in model.graph.output}
    written = {name for name in made if name in used_outside}
    return sum(infos[name].nbytes for name in read | written if name in infos)


