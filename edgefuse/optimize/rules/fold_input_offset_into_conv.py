"""fold-input-offset-into-conv: ``Conv(Add(x, t), W, B)`` -> ``Conv(x, W, B')`` when unpadded.

``W (x + t) = W x + W t``; for a per-input-channel ``t`` the second term is a constant per output
channel: ``B'[o] = B[o] + sum_{j,k} W[o, j, k] * t[channel(o, j)]``. Only exact without padding:
at a padded border the original Conv sees zeros, not ``t``, so padded Convs are refused. ``t``
may be either operand of the Add, and must not broadcast ``x`` to a larger shape.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, constant_array, data_and_constant, make_constant
from edgefuse.optimize.rules._after_conv import conv_bias
from edgefuse.optimize.rules._batchnorm import per_channel_bias
from edgefuse.optimize.rules._conv_input import check_constant_before_conv, input_channel_factors


def _unpadded(result: MatchResult, conv: ir.Node) -> bool:
    auto_pad = conv.attributes.get_string("auto_pad", "NOTSET")
    pads = conv.attributes.get_ints("pads", None) or []
    if auto_pad not in ("NOTSET", "VALID") or any(pads):
        result.fail("the Conv pads its input with zeros, so an input offset is not exact")
        return False
    return True


class FoldInputOffsetIntoConv(Rule):
    id = "fold-input-offset-into-conv"
    description = "fold a per-channel constant Add in front of an unpadded Conv into its bias"

    def pattern(self, op, a, b, w):
        return op.Conv(op.Add(a, b), w, _allow_other_inputs=True, _outputs=["conv_out"])

    def check(self, context, a, b, w, conv_out) -> MatchResult:
        return check_constant_before_conv(
            context, a, b, w, conv_out, "addend", ("B",), conv_check=_unpadded
        )

    def rewrite(self, op, a, b, w, conv_out):
        x, t = data_and_constant(a, b)
        conv = conv_out.producer()
        weights = w.const_value.numpy()
        offset = input_channel_factors(w, t, conv)
        summed = weights.astype(np.float64).reshape(weights.shape[0], weights.shape[1], -1).sum(-1)
        new_b = per_channel_bias(constant_array(conv_bias(conv)), weights.shape[0])
        new_b = new_b + (summed * offset).sum(axis=1)
        return op.Conv(
            x,
            w,
            make_constant(op, new_b.astype(weights.dtype), f"{conv.name}.bias"),
            **conv.attributes,
        )
