"""remove-noop-arithmetic: ``Mul(x, 1)``, ``Add(x, 0)``, ``Sub(x, 0)``, ``Div(x, 1)`` -> ``x``
(``1 * x`` and ``0 + x`` too).

onnxscript's rules (``mul_by_1`` and friends), with two changes. The constant must be exactly 1
or 0: onnxscript compares with ``rel_tol=1e-5, abs_tol=1e-8``, so it would delete ``x * 1.000005``
and, worse, an epsilon guard such as ``var + 1e-12`` in front of a Sqrt or a division, which is
what keeps the result finite at zero. And a refusal says why: onnxscript's constant pattern simply
did not match a near miss, so the report was silent about the ``x * 1.0000001`` a user expected
to go. A constant within onnxscript's tolerance that is not exact is refused with its value; one
further away is a real scale or offset, not a candidate, and stays out of the report.

The constant must be a single element that does not broadcast ``x`` (a scalar, or shape ``[1]``,
``[1, 1]``, ... of a rank no higher than ``x``'s): removing the op must leave ``x``'s shape as it
was.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, RewriteRule

from edgefuse.optimize.rule import AdoptedRule, constant_array, data_and_constant, not_applicable

# op -> the constant that makes it the identity
_IDENTITY_ELEMENT = {"Mul": 1.0, "Add": 0.0, "Sub": 0.0, "Div": 1.0}
_COMMUTATIVE = ("Mul", "Add")
# What onnxscript's mul_by_1/add_0 accepted: the near misses that get a reason in the report.
_NEAR = {"rtol": 1e-5, "atol": 1e-8}


def _data_and_constant(op_type: str, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    return data_and_constant(a, b) if op_type in _COMMUTATIVE else (a, b)


def check_noop(op_type: str, a: ir.Value, b: ir.Value) -> MatchResult:
    """Whether ``op_type(a, b)`` is ``x`` itself; a near miss is refused with the reason."""
    result = MatchResult()
    x, k = _data_and_constant(op_type, a, b)
    identity = _IDENTITY_ELEMENT[op_type]
    array = constant_array(k)
    if array is None or not np.all(np.isclose(array, identity, **_NEAR)):
        return not_applicable(result, f"'{k.name}' is not a constant {identity:g}")
    if not np.all(array == identity):
        if array.size == 1:
            # str() of the numpy scalar: its shortest spelling (1.000005, not 1.0000050067...)
            what = f"is {array.reshape(-1)[0]!s}"
        else:
            gap = float(np.max(np.abs(array.astype(np.float64) - identity)))
            what = f"of shape {list(array.shape)} is up to {gap:g} away from {identity:g}"
        return result.fail(f"the constant '{k.name}' {what}, not exactly {identity:g}", k)
    if array.size != 1:
        return result.fail(
            f"the constant '{k.name}' has shape {list(array.shape)}; only a single-element "
            "constant is removed",
            k,
        )
    rank = x.shape.rank() if x.shape is not None else None
    if array.ndim > 0 and (rank is None or array.ndim > rank):
        return result.fail(
            f"the constant '{k.name}' of shape {list(array.shape)} would broadcast '{x.name}' "
            f"(rank {rank if rank is not None else 'unknown'}) to rank {array.ndim}",
            k,
        )
    return result


def _noop_rule(op_type: str) -> RewriteRule:
    def pattern(op, a, b):
        return getattr(op, op_type)(a, b)

    def check(context, a, b, **_) -> MatchResult:
        del context
        return check_noop(op_type, a, b)

    def replacement(op, a, b, **_):
        x, _constant = _data_and_constant(op_type, a, b)
        return op.Identity(x)

    return RewriteRule(pattern, replacement, check, name=f"remove-noop-{op_type.lower()}")


class RemoveNoopArithmetic(AdoptedRule):
    id = "remove-noop-arithmetic"
    description = "remove x*1, 1*x, x+0, 0+x, x-0 and x/1 (exact constants only)"
    # One pattern per op, not commuted variants: with both operands free, both variants would
    # match and the one binding x as the constant would overwrite the reason in the report.
    onnxscript_rules = tuple(_noop_rule(op_type) for op_type in _IDENTITY_ELEMENT)
