"""Preconditions shared by the rules that fold a per-output-channel constant after a Conv.

``fold-mul-into-conv`` and ``fold-add-into-conv`` refuse the same things in the same words: a
constant computed at run time (not a match at all), non-float weights, non-constant weights or
bias, a rewritten weight shared with another node, and a constant that is not per-channel.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    constant_array,
    float_dtype,
    require_constants,
    require_folded_operand,
    require_unshared,
)
from edgefuse.optimize.rules._channelwise import channel_vector


def conv_bias(conv: ir.Node) -> ir.Value | None:
    """The Conv's bias input, or None when it has none."""
    return conv.inputs[2] if len(conv.inputs) > 2 else None


def check_constant_after_conv(
    context, w: ir.Value, c: ir.Value, conv_out: ir.Value, role: str, rewrites: tuple[str, ...]
) -> MatchResult:
    """Whether ``c`` (called ``role`` in reasons) may fold into the Conv producing ``conv_out``.

    ``rewrites`` names the Conv inputs the fold replaces ("W", "B"): those must not be shared
    with a node outside the match.
    """
    result = MatchResult()
    if require_folded_operand(result, role, c) is None:
        return result
    conv = conv_out.producer()
    bias = conv_bias(conv)
    if not float_dtype(result, w):
        return result
    arrays = require_constants(result, W=w, B=bias, **{role: c})
    if not arrays:
        return result
    inputs = {"W": w, "B": bias}
    if not require_unshared(result, (conv, context.root), **{k: inputs[k] for k in rewrites}):
        return result
    channel_vector(result, arrays[role], arrays["W"].ndim, arrays["W"].shape[0])
    return result


def output_channel_vector(w: ir.Value, c: ir.Value) -> np.ndarray:
    """``c`` as one float64 value per output channel (after a passed check)."""
    weights = w.const_value.numpy()
    return channel_vector(MatchResult(), constant_array(c), weights.ndim, weights.shape[0])
