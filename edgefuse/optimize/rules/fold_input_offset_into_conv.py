"""fold-input-offset-into-conv: ``Conv(Add(x, t), W, B)`` -> ``Conv(x, W, B')`` when unpadded.

``W (x + t) = W x + W t``; for a per-input-channel ``t`` the second term is a constant per output
channel: ``B'[o] = B[o] + sum_{j,k} W[o, j, k] * t[channel(o, j)]``. Only exact without padding:
at a padded border the original Conv sees zeros, not ``t``, so padded Convs are refused. ``t``
may be either operand of the Add, and must not broadcast ``x`` to a larger shape.
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
from edgefuse.optimize.rules._batchnorm import per_channel_bias
from edgefuse.optimize.rules._channelwise import channel_vector
from edgefuse.optimize.rules._conv_input import (
    input_channels,
    keeps_conv_input_shape,
    per_weight_input_channel,
)


class FoldInputOffsetIntoConv(Rule):
    id = "fold-input-offset-into-conv"
    description = "fold a per-channel constant Add in front of an unpadded Conv into its bias"

    def pattern(self, op, a, b, w):
        return op.Conv(op.Add(a, b), w, _allow_other_inputs=True, _outputs=["conv_out"])

    def check(self, context, a, b, w, conv_out) -> MatchResult:
        result = MatchResult()
        x, t = data_and_constant(a, b)
        if require_folded_operand(result, "addend", t) is None:
            return result
        conv = conv_out.producer()
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if not float_dtype(result, w):
            return result
        auto_pad = conv.attributes.get_string("auto_pad", "NOTSET")
        pads = conv.attributes.get_ints("pads", None) or []
        if auto_pad not in ("NOTSET", "VALID") or any(pads):
            return result.fail(
                "the Conv pads its input with zeros, so an input offset is not exact"
            )
        arrays = require_constants(result, W=w, B=bias, addend=t)
        if not arrays:
            return result
        if not require_unshared(result, context.nodes, B=bias):
            return result
        weights = arrays["W"]
        channels = input_channels(conv, weights.shape)
        if channel_vector(result, arrays["addend"], weights.ndim, channels) is None:
            return result
        keeps_conv_input_shape(result, x, weights.ndim, channels)
        return result

    def rewrite(self, op, a, b, w, conv_out):
        x, t = data_and_constant(a, b)
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        vector = channel_vector(
            MatchResult(), constant_array(t), weights.ndim, input_channels(conv, weights.shape)
        )
        offset = per_weight_input_channel(vector, conv, weights.shape)
        summed = weights.astype(np.float64).reshape(weights.shape[0], weights.shape[1], -1).sum(-1)
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        new_b = per_channel_bias(constant_array(bias_value), weights.shape[0])
        new_b = new_b + (summed * offset).sum(axis=1)
        return op.Conv(
            x,
            w,
            make_constant(op, new_b.astype(weights.dtype), f"{conv.name}.bias"),
            **conv.attributes,
        )
