"""fold-input-scale-into-conv: ``Conv(Mul(x, c), W, B)`` -> ``Conv(x, W', B)``.

For a per-input-channel constant ``c``: ``W'[o, j] = W[o, j] * c[channel(o, j)]`` (grouping in
_conv_input). Exact including zero padding, because a padded zero times ``c`` is still zero.
This is how input normalisation ``x * (1/std)`` baked into a model disappears. ``c`` may be
either operand of the Mul, and must not broadcast ``x`` to a larger shape.
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    Rule,
    constant_array,
    data_and_constant,
    float_dtype,
    make_constant,
    require_constants,
    require_folded_operand,
    require_unshared,
)
from edgefuse.optimize.rules._channelwise import channel_vector
from edgefuse.optimize.rules._conv_input import (
    input_channels,
    keeps_conv_input_shape,
    per_weight_input_channel,
)


class FoldInputScaleIntoConv(Rule):
    id = "fold-input-scale-into-conv"
    description = "fold a per-channel constant Mul in front of a Conv into its weights"

    def pattern(self, op, a, b, w):
        return op.Conv(op.Mul(a, b), w, _allow_other_inputs=True, _outputs=["conv_out"])

    def check(self, context, a, b, w, conv_out) -> MatchResult:
        result = MatchResult()
        x, c = data_and_constant(a, b)
        if require_folded_operand(result, "multiplier", c) is None:
            return result
        conv = conv_out.producer()
        if not float_dtype(result, w):
            return result
        arrays = require_constants(result, W=w, multiplier=c)
        if not arrays:
            return result
        if not require_unshared(result, context.nodes, W=w):
            return result
        weights = arrays["W"]
        channels = input_channels(conv, weights.shape)
        if channel_vector(result, arrays["multiplier"], weights.ndim, channels) is None:
            return result
        keeps_conv_input_shape(result, x, weights.ndim, channels)
        return result

    def rewrite(self, op, a, b, w, conv_out):
        x, c = data_and_constant(a, b)
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        vector = channel_vector(
            MatchResult(), constant_array(c), weights.ndim, input_channels(conv, weights.shape)
        )
        factor = per_weight_input_channel(vector, conv, weights.shape)
        factor = factor.reshape(factor.shape + (1,) * (weights.ndim - 2))
        new_w = (weights.astype(np.float64) * factor).astype(weights.dtype)
        return op.Conv(
            x, make_constant(op, new_w, f"{conv.name}.weight"), *conv.inputs[2:], **conv.attributes
        )
