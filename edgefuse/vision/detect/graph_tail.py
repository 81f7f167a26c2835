"""What a detector's graph does between its last learned layers and each output.

Why: some layouts have the same shapes and differ only in what the graph already did. A raw
YOLOX head (``decode_in_inference=False``) and a decoded YOLOv5 are both ``[1, N, 5 + C]``; the
first hands over conv outputs (grid offsets, log sizes), the second passes its box channels
through the grid Add, the stride Mul and an Exp or Pow. A YOLOv10 ``[1, 300, 6]`` went through a
TopK. DETR scores are probabilities when a Sigmoid ends the branch, logits otherwise; PicoDet's
class scores pass a Sigmoid (or the aligned head's Sqrt), its DFL distributions do not. Reading
that from the graph tells the layouts apart without guessing.

The walk goes from an output towards the inputs and stops at the last learned layers (Conv,
Gemm, MatMul...), so it sees the head's post-processing only, never the backbone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import onnx

from edgefuse._graph_walk import all_nodes

LEARNED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "ConvInteger",
                     "QLinearConv", "QLinearMatMul", "MatMulInteger"})
# Ops that move or regroup values without computing on them.
PLUMBING = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Flatten",
                      "Concat", "Slice", "Split", "Cast", "Gather", "Expand", "Tile"})
ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})
SELECTION = frozenset({"TopK", "NonMaxSuppression", "GatherElements", "GatherND", "ArgMax"})
ACTIVATIONS = frozenset({"Sigmoid", "Softmax", "Sqrt", "HardSigmoid"})
ROW_SELECTION = frozenset({"GatherElements", "GatherND"})  # pick rows, compute nothing
MAX_NODES = 2000  # a head's post-processing is tens of nodes; this bounds a pathological graph


@dataclasses.dataclass(frozen=True)
class Tail:
    """The op types between an output and the learned layers that feed it."""

    ops: frozenset[str]
    constant_arithmetic: bool  # an Add/Sub/Mul/Div with a constant operand (grid, stride)
    first_compute: str | None  # the first op below the output that is not plumbing
    # The first computing op on the path of channel 0 through plumbing and row selections: for an
    # end2end [1, K, 6] output, what made its boxes (a Sigmoid: normalised, as DETR's decoder
    # gives them; a Mul/Add/Sub/Div: decoded to input pixels, as YOLO heads do).
    boxes_from: str | None = None

    @property
    def decodes_boxes(self) -> bool:
        """Boxes leave the graph decoded: a grid/stride arithmetic, an Exp or a Pow."""
        return bool({"Exp", "Pow"} & self.ops) or self.constant_arithmetic

    @property
    def selects(self) -> bool:
        """The graph picks detections itself (TopK, NMS, gathers): an NMS-free export."""
        return bool(SELECTION & self.ops)

    @property
    def activated(self) -> bool:
        """The value is an activation's output (probabilities), not a raw conv/linear output."""
        return self.first_compute in ACTIVATIONS

    def describe(self) -> str:
        shown = sorted(self.ops - PLUMBING) or ["only reshapes"]
        return ", ".join(shown)


def tails(model: onnx.ModelProto) -> dict[str, Tail]:
    """The ``Tail`` of each graph output of ``model``."""
    graph = model.graph
    producers = {out: node for node in all_nodes(graph) for out in node.output if out}
    constants = {init.name for init in graph.initializer}
    constants |= {node.output[0] for node in graph.node if node.op_type == "Constant"}
    return {out.name: _tail(out.name, producers, constants) for out in graph.output}


def _tail(name: str, producers: Mapping[str, onnx.NodeProto], constants: set[str]) -> Tail:
    ops: set[str] = set()
    constant_arithmetic = False
    seen: set[int] = set()
    stack = [name]
    while stack and len(seen) < MAX_NODES:
        node = producers.get(stack.pop())
        if node is None or id(node) in seen or node.op_type in LEARNED:
            continue
        seen.add(id(node))
        ops.add(node.op_type)
        if node.op_type in ARITHMETIC and any(i in constants for i in node.input):
            constant_arithmetic = True
        stack.extend(i for i in node.input if i and i not in constants)
    return Tail(frozenset(ops), constant_arithmetic, _first_compute(name, producers),
                _first_compute(name, producers, PLUMBING | ROW_SELECTION))


def _first_compute(name: str, producers: Mapping[str, onnx.NodeProto],
                   through: frozenset[str] = PLUMBING) -> str | None:
    """The first op below ``name`` not in ``through`` (following each one's data input)."""
    node = producers.get(name)
    for _ in range(64):
        if node is None:
            return None
        if node.op_type not in through:
            return node.op_type
        node = producers.get(node.input[0]) if node.input else None
    return None
