"""fold-bn-into-conv: ``BatchNormalization(Conv(x, W, B))`` -> ``Conv(x, W', B')``.

With the BN affine map ``y * scale + shift`` per output channel ``o``:
``W'[o] = W[o] * scale[o]`` and ``B'[o] = B[o] * scale[o] + shift[o]`` (``B = 0`` when absent).
Exact up to float rounding: convolution is linear in its weights.
"""

from __future__ import annotations

from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    Rule,
    float_dtype,
    make_constant,
    require_constants,
    require_unshared,
)
from edgefuse.optimize.rules._batchnorm import bn_affine, per_channel_bias


class FoldBnIntoConv(Rule):
    id = "fold-bn-into-conv"
    description = "fold an inference BatchNormalization into the Conv that feeds it"

    def pattern(self, op, x, w):
        conv = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.BatchNormalization(conv, _allow_other_inputs=True, _outputs=["bn_out"])

    def check(self, context, x, w, conv_out, bn_out) -> MatchResult:
        result = MatchResult()
        conv, bn = conv_out.producer(), bn_out.producer()
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if not float_dtype(result, w):
            return result
        if not require_constants(result, W=w, B=bias):
            return result
        if not require_unshared(result, (conv, bn), W=w, B=bias):
            return result
        bn_affine(result, bn)
        return result

    def rewrite(self, op, x, w, conv_out, bn_out):
        conv, bn = conv_out.producer(), bn_out.producer()
        scale, shift = bn_affine(MatchResult(), bn)
        weights = w.const_value.numpy()
        bias = (
            conv.inputs[2].const_value.numpy() if len(conv.inputs) > 2 and conv.inputs[2] else None
        )
        shape = (-1,) + (1,) * (weights.ndim - 1)
        new_w = (weights.astype("float64") * scale.reshape(shape)).astype(weights.dtype)
        new_b = (per_channel_bias(bias, weights.shape[0]) * scale + shift).astype(weights.dtype)
        return op.Conv(
            x,
            make_constant(op, new_w, f"{conv.name}.weight"),
            make_constant(op, new_b, f"{conv.name}.bias"),
            **conv.attributes,
        )
