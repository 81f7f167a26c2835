"""recognize-hardswish: ``Clip(x + 3, 0, 6) / 6`` -> ``HardSigmoid(x, 1/6, 0.5)``, and ``x * Clip(x
+ 3, 0, 6) / 6`` or ``x * HardSigmoid(x, 1/6, 0.5)`` -> ``HardSwish(x)`` (commuted forms too).

The patterns are onnxscript's (``fuse_hardswish_rules``), with stricter checks: 3, 0, 6 and 6 must
be exactly those values (onnxscript accepts ``rel_tol=1e-4``, so ``x + 3.0003`` became HardSwish)
and single-element constants that do not raise the rank of ``x`` (onnxscript accepted a
``[1, 1, 1, 1]`` divisor on a 3-D ``x``, and the HardSwish it left had the wrong rank).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, RewriteRule

from edgefuse.optimize.rule import AdoptedRule, constant_array


def _shifted_relu6(op, x, bias, low, high):
    return op.Clip(op.Add(x, bias), low, high)


def _hard_sigmoid_spelled_out(op, a, b, low, high, divisor):
    return op.Div(op.Clip(op.Add(a, b), low, high), divisor)


def _hard_swish_spelled_out(op, x, bias, low, high, divisor):
    return op.Div(op.Mul(_shifted_relu6(op, x, bias, low, high), x), divisor)


def _hard_swish_of_hard_sigmoid(op, x):
    hard_sigmoid = op.HardSigmoid(x, _allow_other_attributes=True, _outputs=["hard_sigmoid"])
    return op.Mul(hard_sigmoid, x)


def _split_add(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(x, bias) of ``Add(a, b)``: matched as written, so that a refusal names the real bias."""
    return (b, a) if constant_array(a) is not None and constant_array(b) is None else (a, b)


def _exact_constants(x: ir.Value, **roles: tuple[ir.Value, float]) -> MatchResult:
    result = MatchResult()
    rank = x.shape.rank() if x.shape is not None else None
    for role, (value, expected) in roles.items():
        array = constant_array(value)
        if array is None or array.size != 1 or array.item() != expected:
            label = role.replace("_", " ")
            return result.fail(f"{label} '{value.name}' is not the scalar constant {expected:g}")
        if array.ndim > 0 and (rank is None or array.ndim > rank):
            return result.fail(
                f"'{value.name}' of shape {array.shape} would broadcast '{x.name}' to a higher rank"
            )
    return result


def _is_hard_swish(context, x, bias, low, high, divisor, **_) -> MatchResult:
    del context
    return _exact_constants(
        x, bias=(bias, 3.0), clip_min=(low, 0.0), clip_max=(high, 6.0), divisor=(divisor, 6.0)
    )


def _is_hard_sigmoid(context, a, b, low, high, divisor, **_) -> MatchResult:
    del context
    x, bias = _split_add(a, b)
    return _exact_constants(
        x, bias=(bias, 3.0), clip_min=(low, 0.0), clip_max=(high, 6.0), divisor=(divisor, 6.0)
    )


def _is_hard_swish_sigmoid(context, x, hard_sigmoid, **_) -> MatchResult:
    del context
    node = hard_sigmoid.producer()
    alpha = node.attributes.get_float("alpha", 0.2)
    beta = node.attributes.get_float("beta", 0.5)
    if not (np.isclose(alpha, 1 / 6) and math.isclose(beta, 0.5)):
        return MatchResult().fail(
            f"HardSigmoid '{node.name}' has alpha={alpha:g}, beta={beta:g}; HardSwish is "
            "alpha=1/6, beta=0.5"
        )
    return MatchResult()


def _hard_swish(op, x, **_):
    return op.HardSwish(x)


def _hard_sigmoid(op, a, b, **_):
    x, _bias = _split_add(a, b)
    return op.HardSigmoid(x, alpha=1 / 6, beta=0.5)


class RecognizeHardSwish(AdoptedRule):
    id = "recognize-hardswish"
    description = "recognise HardSigmoid/HardSwish spelled out as Add, Clip, Div and Mul"
    onnxscript_rules = (
        *RewriteRule(_hard_swish_spelled_out, _hard_swish, _is_hard_swish).commute(),
        RewriteRule(_hard_sigmoid_spelled_out, _hard_sigmoid, _is_hard_sigmoid),
        *RewriteRule(_hard_swish_of_hard_sigmoid, _hard_swish, _is_hard_swish_sigmoid).commute(),
    )
