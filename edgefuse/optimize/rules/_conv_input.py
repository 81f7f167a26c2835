"""Per-input-channel constants in front of a (grouped) Conv, shared by the input-side rules.

A Conv with ``group`` groups reads input channel ``g * C_in/group + j`` through ``W[o, j]`` for
every output channel ``o`` of group ``g = o // (C_out / group)``. Reshaping a per-input-channel
vector to ``[C_out, C_in/group]`` this way lets it multiply the weights directly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    constant_array,
    data_and_constant,
    float_dtype,
    require_constants,
    require_folded_operand,
    require_unshared,
)
from edgefuse.optimize.rules._after_conv import conv_bias
from edgefuse.optimize.rules._channelwise import channel_vector


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


def check_constant_before_conv(
    context,
    a: ir.Value,
    b: ir.Value,
    w: ir.Value,
    conv_out: ir.Value,
    role: str,
    rewrites: tuple[str, ...],
    conv_check: Callable[[MatchResult, ir.Node], bool] | None = None,
) -> MatchResult:
    """Whether the constant operand of ``a (op) b`` in front of a Conv folds into it.

    The shared refusals of the input-side rules, in the same words: the constant computed at run
    time (not a match), non-float or non-constant weights, ``conv_check`` (a rule's own
    condition on the Conv), rewritten inputs ("W", "B") shared outside the match, a constant
    that is not per input channel, and one that would broadcast the Conv's input.
    """
    result = MatchResult()
    x, c = data_and_constant(a, b)
    if require_folded_operand(result, role, c) is None:
        return result
    conv = conv_out.producer()
    bias = conv_bias(conv)
    if not float_dtype(result, w):
        return result
    if conv_check is not None and not conv_check(result, conv):
        return result
    arrays = require_constants(result, W=w, B=bias, **{role: c})
    if not arrays:
        return result
    inputs = {"W": w, "B": bias}
    if not require_unshared(result, context.nodes, **{k: inputs[k] for k in rewrites}):
        return result
    weights = arrays["W"]
    channels = input_channels(conv, weights.shape)
    if channel_vector(result, arrays[role], weights.ndim, channels) is None:
        return result
    keeps_conv_input_shape(result, x, weights.ndim, channels)
    return result


def input_channel_factors(w: ir.Value, c: ir.Value, conv: ir.Node) -> np.ndarray:
    """``c`` laid out as ``[C_out, C_in/group]`` to match the weights (after a passed check)."""
    weights = w.const_value.numpy()
    vector = channel_vector(
        MatchResult(), constant_array(c), weights.ndim, input_channels(conv, weights.shape)
    )
    return per_weight_input_channel(vector, conv, weights.shape)
