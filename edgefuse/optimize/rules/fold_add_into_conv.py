"""fold-add-into-conv: ``Add(Conv(x, W, B), c)`` -> ``Conv(x, W, B + c)``.

For a per-output-channel constant ``c`` (see _channelwise): ``(W x + B) + c = W x + (B + c)``.
"""

from __future__ import annotations

from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, constant_array, make_constant
from edgefuse.optimize.rules._after_conv import (
    check_constant_after_conv,
    conv_bias,
    output_channel_vector,
)
from edgefuse.optimize.rules._batchnorm import per_channel_bias


class FoldAddIntoConv(Rule):
    id = "fold-add-into-conv"
    description = "fold a per-channel constant Add after a Conv into its bias"
    commute = True

    def pattern(self, op, x, w, c):
        return op.Add(op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"]), c)

    def check(self, context, x, w, c, conv_out) -> MatchResult:
        # Only the bias is rewritten: the weights stay shared, untouched.
        return check_constant_after_conv(context, w, c, conv_out, "addend", ("B",))

    def rewrite(self, op, x, w, c, conv_out):
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        bias = per_channel_bias(constant_array(conv_bias(conv)), weights.shape[0])
        new_b = bias + output_channel_vector(w, c)
        return op.Conv(
            x,
            w,
            make_constant(op, new_b.astype(weights.dtype), f"{conv.name}.bias"),
            **conv.attributes,
        )
