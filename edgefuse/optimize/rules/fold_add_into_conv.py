"""fold-add-into-conv: ``Add(Conv(x, W, B), c)`` -> ``Conv(x, W, B + c)``.

For a per-output-channel constant ``c`` (see _channelwise): ``(W x + B) + c = W x + (B + c)``.
"""

from __future__ import annotations

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


class FoldAddIntoConv(Rule):
    id = "fold-add-into-conv"
    description = "fold a per-channel constant Add after a Conv into its bias"
    commute = True

    def pattern(self, op, x, w, c):
        return op.Add(op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"]), c)

    def check(self, context, x, w, c, conv_out) -> MatchResult:
        result = MatchResult()
        if require_folded_operand(result, "addend", c) is None:
            return result
        conv = conv_out.producer()
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if not float_dtype(result, w):
            return result
        arrays = require_constants(result, W=w, B=bias, addend=c)
        if not arrays:
            return result
        if not require_unshared(result, (conv, context.root), B=bias):
            return result
        channel_vector(result, arrays["addend"], arrays["W"].ndim, arrays["W"].shape[0])
        return result

    def rewrite(self, op, x, w, c, conv_out):
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        addend = channel_vector(MatchResult(), constant_array(c), weights.ndim, weights.shape[0])
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        new_b = per_channel_bias(constant_array(bias_value), weights.shape[0]) + addend
        return op.Conv(
            x,
            w,
            make_constant(op, new_b.astype(weights.dtype), f"{conv.name}.bias"),
            **conv.attributes,
        )
