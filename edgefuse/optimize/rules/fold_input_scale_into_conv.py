"""fold-input-scale-into-conv: ``Conv(Mul(x, c), W, B)`` -> ``Conv(x, W', B)``.

For a per-input-channel constant ``c``: ``W'[o, j] = W[o, j] * c[channel(o, j)]`` (grouping in
_conv_input). Exact including zero padding, because a padded zero times ``c`` is still zero.
This is how input normalisation ``x * (1/std)`` baked into a model disappears. ``c`` may be
either operand of the Mul, and must not broadcast ``x`` to a larger shape.
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, data_and_constant, make_constant
from edgefuse.optimize.rules._conv_input import check_constant_before_conv, input_channel_factors


class FoldInputScaleIntoConv(Rule):
    id = "fold-input-scale-into-conv"
    description = "fold a per-channel constant Mul in front of a Conv into its weights"

    def pattern(self, op, a, b, w):
        return op.Conv(op.Mul(a, b), w, _allow_other_inputs=True, _outputs=["conv_out"])

    def check(self, context, a, b, w, conv_out) -> MatchResult:
        return check_constant_before_conv(context, a, b, w, conv_out, "multiplier", ("W",))

    def rewrite(self, op, a, b, w, conv_out):
        x, c = data_and_constant(a, b)
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        factor = input_channel_factors(w, c, conv)
        factor = factor.reshape(factor.shape + (1,) * (weights.ndim - 2))
        new_w = (weights.astype(np.float64) * factor).astype(weights.dtype)
        return op.Conv(
            x, make_constant(op, new_w, f"{conv.name}.weight"), *conv.inputs[2:], **conv.attributes
        )
