"""Whether a segmentation output holds probabilities or logits, read from the graph that makes it.

Why from the graph: a one-channel mask is thresholded at probability 0.5, which is the value 0.5
when the graph ends in Sigmoid (U^2-Net, BASNet, MODNet export their maps that way) and the
value 0 when it ends in the last convolution. The shapes alone cannot tell, and the wrong guess
makes every pixel foreground. The node that produces the output is followed back through
operators that move or resample values without changing what they mean (Reshape, Transpose,
Resize, Cast, ...), so ``Sigmoid -> Resize -> Squeeze`` still reads as a sigmoid.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

ACTIVATION_OF_OP = {"Sigmoid": "sigmoid", "Softmax": "softmax", "LogSoftmax": "none",
                    "HardSigmoid": "sigmoid"}
# Operators whose output means what their first input meant.
PASS_THROUGH = frozenset({
    "Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Resize",
    "Upsample", "Slice", "Pad", "MaxPool", "AveragePool", "Expand", "Tile", "Gather",
})


def output_activation(model: onnx.ModelProto | str | os.PathLike[str] | None,
                      output: str) -> tuple[str | None, str]:
    """(``sigmoid``, ``softmax``, ``none`` or None when the graph cannot say; why).

    ``model`` is the ONNX the session runs (a path is read without its external data).
    """
    if model is None:
        return None, "no ONNX graph to read (an OM file alone)"
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(Path(model)), load_external_data=False)
    producers = {name: node for node in model.graph.node for name in node.output}
    name, path = output, []
    while name in producers:
        node = producers[name]
        path.append(node.op_type)
        if node.op_type in ACTIVATION_OF_OP:
            return ACTIVATION_OF_OP[node.op_type], _why(output, path)
        if node.op_type not in PASS_THROUGH or not node.input:
            return "none", _why(output, path)
        name = node.input[0]
    return None, f"'{output}' is not made by a node of the graph"


def _why(output: str, path: list[str]) -> str:
    chain = " <- ".join(path)
    return f"the graph makes '{output}' by {chain}"
