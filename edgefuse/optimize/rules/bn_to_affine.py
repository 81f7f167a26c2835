"""bn-to-affine: a BatchNormalization nothing absorbed -> ``Add(Mul(x, scale), shift)``.

``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale``, shaped ``[C, 1, ...]`` to
broadcast along axis 1. Runs after the folding rules, so it only sees BatchNorms that follow a
non-linear op or a graph input; the Mul/Add it leaves can still fold into a following Conv
(fold-input-scale-into-conv / fold-input-offset-into-conv). A BatchNorm that reads a Conv, a
ConvTranspose or a Gemm through an Identity (what an elimination earlier in the same sweep leaves)
is left for the folding rules' next round, once the Identity is gone.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, make_constant
from edgefuse.optimize.rules._batchnorm import bn_affine

_FOLDING_PRODUCERS = ("Conv", "ConvTranspose", "Gemm")


class BnToAffine(Rule):
    id = "bn-to-affine"
    description = "spell a standalone inference BatchNormalization as a per-channel Mul and Add"

    def pattern(self, op, x):
        return op.BatchNormalization(x, _allow_other_inputs=True, _outputs=["bn_out"])

    def check(self, context, x, bn_out) -> MatchResult:
        result = MatchResult()
        if x.shape is None or x.shape.rank() is None or x.shape.rank() < 2:
            return result.fail(f"the rank of '{x.name}' is unknown or below 2")
        foldable = _producer_behind_identities(x)
        if foldable is not None and foldable.op_type in _FOLDING_PRODUCERS:
            return result.fail(
                f"'{x.name}' is an Identity of {foldable.op_type} '{foldable.name}': "
                "left to the BN folds once the Identity is removed"
            )
        bn_affine(result, bn_out.producer())
        return result

    def rewrite(self, op, x, bn_out):
        bn = bn_out.producer()
        scale, shift = bn_affine(MatchResult(), bn)
        dtype = x.dtype.numpy()  # not the parameters': opset 15+ lets them be float16 on float32
        shape = (-1,) + (1,) * (x.shape.rank() - 2)
        scaled = op.Mul(
            x, make_constant(op, scale.reshape(shape).astype(dtype), f"{bn.name}.scale")
        )
        return op.Add(
            scaled, make_constant(op, shift.reshape(shape).astype(dtype), f"{bn.name}.shift")
        )


def _producer_behind_identities(value: ir.Value) -> ir.Node | None:
    """The first producer upstream of ``value`` that is not an Identity, if one is in between."""
    producer = value.producer()
    if not _is_identity(producer):
        return None
    while _is_identity(producer):
        producer = producer.inputs[0].producer()
    return producer


def _is_identity(node: ir.Node | None) -> bool:
    return node is not None and node.op_type == "Identity" and node.domain == ""
