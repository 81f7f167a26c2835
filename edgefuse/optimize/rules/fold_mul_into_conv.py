"""fold-mul-into-conv: ``Mul(Conv(x, W, B), c)`` -> ``Conv(x, W * c, B * c)``.

For a per-output-channel constant ``c`` (see _channelwise): ``(W x + B) * c = (W * c) x + B * c``.
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    Rule,
    constant_array,
    float_dtype,
    make_constant,
    require_constants,
    require_folded_operand,
    require_unshared,
)
from edgefuse.optimize.rules._batchnorm import per_channel_bias
from edgefuse.optimize.rules._channelwise import channel_vector


class FoldMulIntoConv(Rule):
    id = "fold-mul-into-conv"
    description = "fold a per-channel constant Mul after a Conv into its weights and bias"
    commute = True

    def pattern(self, op, x, w, c):
        return op.Mul(op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"]), c)

    def check(self, context, x, w, c, conv_out) -> MatchResult:
        result = MatchResult()
        if require_folded_operand(result, "multiplier", c) is None:
            return result
        conv = conv_out.producer()
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if not float_dtype(result, w):
            return result
        arrays = require_constants(result, W=w, B=bias, multiplier=c)
        if not arrays:
            return result
        if not require_unshared(result, (conv, context.root), W=w, B=bias):
            return result
        channel_vector(result, arrays["multiplier"], arrays["W"].ndim, arrays["W"].shape[0])
        return result

    def rewrite(self, op, x, w, c, conv_out):
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        factor = channel_vector(MatchResult(), constant_array(c), weights.ndim, weights.shape[0])
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = constant_array(bias_value)
        shape = (-1,) + (1,) * (weights.ndim - 1)
        new_w = (weights.astype(np.float64) * factor.reshape(shape)).astype(weights.dtype)
        new_b = (per_channel_bias(bias, weights.shape[0]) * factor).astype(weights.dtype)
        return op.Conv(
            x,
            make_constant(op, new_w, f"{conv.name}.weight"),
            make_constant(op, new_b, f"{conv.name}.bias"),
            **conv.attributes,
        )
