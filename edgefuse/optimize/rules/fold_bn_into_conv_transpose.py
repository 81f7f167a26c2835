"""fold-bn-into-conv-transpose: ``BatchNormalization(ConvTranspose(x, W, B))`` -> ``ConvTranspose``.

ConvTranspose weights are laid out ``[C_in, C_out / group, k...]``: output channel
``o = g * (C_out / group) + j`` is scaled through ``W[g * C_in/group : (g+1) * C_in/group, j]``.
So ``W'[:, j]`` of group ``g`` is multiplied by ``scale[o]``;
``B'[o] = B[o] * scale[o] + shift[o]``.
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    Rule,
    float_dtype,
    make_constant,
    require_constants,
    require_unshared,
)
from edgefuse.optimize.rules._batchnorm import bn_affine, per_channel_bias


class FoldBnIntoConvTranspose(Rule):
    id = "fold-bn-into-conv-transpose"
    description = "fold an inference BatchNormalization into the ConvTranspose that feeds it"

    def pattern(self, op, x, w):
        deconv = op.ConvTranspose(x, w, _allow_other_inputs=True, _outputs=["deconv_out"])
        return op.BatchNormalization(deconv, _allow_other_inputs=True, _outputs=["bn_out"])

    def check(self, context, x, w, deconv_out, bn_out) -> MatchResult:
        result = MatchResult()
        deconv, bn = deconv_out.producer(), bn_out.producer()
        bias = deconv.inputs[2] if len(deconv.inputs) > 2 else None
        if not float_dtype(result, w):
            return result
        if not require_constants(result, W=w, B=bias):
            return result
        if not require_unshared(result, (deconv, bn), W=w, B=bias):
            return result
        bn_affine(result, bn)
        return result

    def rewrite(self, op, x, w, deconv_out, bn_out):
        deconv, bn = deconv_out.producer(), bn_out.producer()
        scale, shift = bn_affine(MatchResult(), bn)
        weights = w.const_value.numpy()
        bias_value = deconv.inputs[2] if len(deconv.inputs) > 2 else None
        bias = bias_value.const_value.numpy() if bias_value is not None else None
        group = deconv.attributes.get_int("group", 1)
        c_in, c_out_per_group = weights.shape[0], weights.shape[1]
        grouped = weights.astype(np.float64).reshape(group, c_in // group, c_out_per_group, -1)
        grouped = grouped * scale.reshape(group, 1, c_out_per_group, 1)
        new_w = grouped.reshape(weights.shape).astype(weights.dtype)
        channels = group * c_out_per_group
        new_b = (per_channel_bias(bias, channels) * scale + shift).astype(weights.dtype)
        return op.ConvTranspose(
            x,
            make_constant(op, new_w, f"{deconv.name}.weight"),
            make_constant(op, new_b, f"{deconv.name}.bias"),
            **deconv.attributes,
        )
