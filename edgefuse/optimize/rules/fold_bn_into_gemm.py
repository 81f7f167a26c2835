"""fold-bn-into-gemm: ``BatchNormalization(Gemm(A, B, C))`` -> ``Gemm(A, B', C')``.

``Gemm = alpha * A @ op(B) + beta * C`` with output features on axis 1. With the BN affine map
per feature ``n``: column ``n`` of ``op(B)`` is scaled by ``scale[n]`` (a row of B when
``transB=1``), and ``C' = (beta * C) * scale + shift`` with ``beta`` set to 1.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import (
    Rule,
    float_dtype,
    make_constant,
    require_constants,
    require_unshared,
)
from edgefuse.optimize.rules._batchnorm import bn_affine, per_channel_bias
from edgefuse.optimize.rules._channelwise import channel_vector


class FoldBnIntoGemm(Rule):
    id = "fold-bn-into-gemm"
    description = "fold an inference BatchNormalization into the Gemm that feeds it"

    def pattern(self, op, a, b):
        gemm = op.Gemm(a, b, _allow_other_inputs=True, _outputs=["gemm_out"])
        return op.BatchNormalization(gemm, _allow_other_inputs=True, _outputs=["bn_out"])

    def check(self, context, a, b, gemm_out, bn_out) -> MatchResult:
        result = MatchResult()
        gemm, bn = gemm_out.producer(), bn_out.producer()
        c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        if not float_dtype(result, b):
            return result
        arrays = require_constants(result, B=b, C=c)
        if not arrays:
            return result
        if not require_unshared(result, (gemm, bn), B=b, C=c):
            return result
        features = arrays["B"].shape[0 if gemm.attributes.get_int("transB", 0) else 1]
        # C broadcasts against the [M, N] output: only a constant along axis 1 is per-feature
        # ([M, 1] has N elements when M == N, and is still per-row).
        if "C" in arrays and channel_vector(result, arrays["C"], 2, features) is None:
            return result
        bn_affine(result, bn)
        return result

    def rewrite(self, op, a, b, gemm_out, bn_out):
        gemm, bn = gemm_out.producer(), bn_out.producer()
        scale, shift = bn_affine(MatchResult(), bn)
        weights = b.const_value.numpy()
        trans_b = gemm.attributes.get_int("transB", 0)
        features = weights.shape[0 if trans_b else 1]
        c_value = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        bias = c_value.const_value.numpy() if c_value is not None else None
        beta = gemm.attributes.get_float("beta", 1.0)
        scale_shape = (-1, 1) if trans_b else (1, -1)
        new_b = (weights.astype(np.float64) * scale.reshape(scale_shape)).astype(weights.dtype)
        new_c = ((per_channel_bias(bias, features) * beta) * scale + shift).astype(weights.dtype)
        attributes = {k: v for k, v in gemm.attributes.items() if k != "beta"}
        attributes["beta"] = ir.AttrFloat32("beta", 1.0)
        return op.Gemm(
            a,
            make_constant(op, new_b, f"{gemm.name}.weight"),
            make_constant(op, new_c, f"{gemm.name}.bias"),
            **attributes,
        )
