"""remove-noop-arithmetic: ``Mul(x, 1)``, ``Add(x, 0)``, ``Sub(x, 0)``, ``Div(x, 1)`` -> ``x``.

onnxscript's patterns (``mul_by_1`` and friends), with one change: the scalar constant must be
exactly 1 or 0. onnxscript's own rules compare with ``rel_tol=1e-5, abs_tol=1e-8``, so they would
delete ``x * 1.000005`` and, worse, an epsilon guard such as ``var + 1e-12`` in front of a Sqrt or
a division, which is what keeps the result finite at zero. A scalar never broadcasts ``x``.
"""

from __future__ import annotations

from onnxscript.rewriter import RewriteRule
from onnxscript.rewriter.pattern import Constant

from edgefuse.optimize.rule import AdoptedRule


def _exactly(value: float) -> Constant:
    return Constant(value, rel_tol=0.0, abs_tol=0.0)


def _mul_by_1(op, x):
    return op.Mul(x, _exactly(1))


def _add_0(op, x):
    return op.Add(x, _exactly(0))


def _sub_0(op, x):
    return op.Sub(x, _exactly(0))


def _div_by_1(op, x):
    return op.Div(x, _exactly(1))


def _identity(op, x):
    return op.Identity(x)


class RemoveNoopArithmetic(AdoptedRule):
    id = "remove-noop-arithmetic"
    description = "remove x*1, 1*x, x+0, 0+x, x-0 and x/1 (exact constants only)"
    onnxscript_rules = (
        *RewriteRule(_mul_by_1, _identity).commute(),
        *RewriteRule(_add_0, _identity).commute(),
        RewriteRule(_sub_0, _identity),
        RewriteRule(_div_by_1, _identity),
    )
