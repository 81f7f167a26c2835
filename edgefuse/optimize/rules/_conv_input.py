"""Per-input-channel constants in front of a (grouped) Conv, shared by the input-side rules.

A Conv with ``group`` groups reads input channel ``g * C_in/group + j`` through ``W[o, j]`` for
every output channel ``o`` of group ``g = o // (C_out / group)``. Reshaping a per-input-channel
vector to ``[C_out, C_in/group]`` this way lets it multiply the weights directly.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult


def per_weight_input_channel(vector: np.ndarray, conv: ir.Node, weight_shape) -> np.ndarray:
    """``vector`` (length C_in) laid out as ``[C_out, C_in/group]`` to match the weights."""
    group = conv.attributes.get_int("group", 1)
    c_out, c_in_per_group = weight_shape[0], weight_shape[1]
    by_group = vector.reshape(group, 1, c_in_per_group)
    return np.broadcast_to(by_group, (group, c_out // group, c_in_per_group)).reshape(
        c_out, c_in_per_group
    )


def input_channels(conv: ir.Node, weight_shape) -> int:
    return conv.attributes.get_int("group", 1) * weight_shape[1]


def keeps_conv_input_shape(result: MatchResult, x: ir.Value, rank: int, channels: int) -> bool:
    """Refuse when the constant broadcasts ``x`` (to more channels or a higher rank).

    Removing the Mul/Add hands ``x`` itself to the Conv, which is only valid when ``x`` already
    has the shape the Conv read: ``[N, C_in, ...]`` of the weights' rank.
    """
    shape = x.shape
    if shape is None or shape.rank() != rank or shape[1] != channels:
        result.fail(
            f"'{x.name}' has shape {shape}: the constant would broadcast it to rank {rank} "
            f"with {channels} channels"
        )
        return False
    return True
