"""bn-to-affine: a BatchNormalization nothing absorbed -> ``Add(Mul(x, scale), shift)``.

``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale``, shaped ``[C, 1, ...]`` to
broadcast along axis 1. Runs after the folding rules, so it only sees BatchNorms that follow a
non-linear op or a graph input; the Mul/Add it leaves can still fold into a following Conv
(fold-input-scale-into-conv / fold-input-offset-into-conv).
"""

from __future__ import annotations

from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, make_constant
from edgefuse.optimize.rules._batchnorm import bn_affine


class BnToAffine(Rule):
    id = "bn-to-affine"
    description = "spell a standalone inference BatchNormalization as a per-channel Mul and Add"

    def pattern(self, op, x):
        return op.BatchNormalization(x, _allow_other_inputs=True, _outputs=["bn_out"])

    def check(self, context, x, bn_out) -> MatchResult:
        result = MatchResult()
        if x.shape is None or x.shape.rank() is None or x.shape.rank() < 2:
            return result.fail(f"the rank of '{x.name}' is unknown or below 2")
        bn_affine(result, bn_out.producer())
        return result

    def rewrite(self, op, x, bn_out):
        bn = bn_out.producer()
        scale, shift = bn_affine(MatchResult(), bn)
        dtype = bn.inputs[1].const_value.numpy().dtype
        shape = (-1,) + (1,) * (x.shape.rank() - 2)
        scaled = op.Mul(
            x, make_constant(op, scale.reshape(shape).astype(dtype), f"{bn.name}.scale")
        )
        return op.Add(
            scaled, make_constant(op, shift.reshape(shape).astype(dtype), f"{bn.name}.shift")
        )
