"""fold-mul-into-conv: ``Mul(Conv(x, W, B), c)`` -> ``Conv(x, W * c, B * c)``.

For a per-output-channel constant ``c`` (see _channelwise): ``(W x + B) * c = (W * c) x + B * c``.
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, constant_array, make_constant
from edgefuse.optimize.rules._after_conv import (
    check_constant_after_conv,
    conv_bias,
    output_channel_vector,
)
from edgefuse.optimize.rules._batchnorm import per_channel_bias


class FoldMulIntoConv(Rule):
    id = "fold-mul-into-conv"
    description = "fold a per-channel constant Mul after a Conv into its weights and bias"
    commute = True

    def pattern(self, op, x, w, c):
        return op.Mul(op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"]), c)

    def check(self, context, x, w, c, conv_out) -> MatchResult:
        return check_constant_after_conv(context, w, c, conv_out, "multiplier", ("W", "B"))

    def rewrite(self, op, x, w, c, conv_out):
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        factor = output_channel_vector(w, c)
        shape = (-1,) + (1,) * (weights.ndim - 1)
        new_w = (weights.astype(np.float64) * factor.reshape(shape)).astype(weights.dtype)
        bias = constant_array(conv_bias(conv))
        new_b = (per_channel_bias(bias, weights.shape[0]) * factor).astype(weights.dtype)
        return op.Conv(
            x,
            make_constant(op, new_w, f"{conv.name}.weight"),
            make_constant(op, new_b, f"{conv.name}.bias"),
            **conv.attributes,
        )
