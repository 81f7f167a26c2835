"""silu-to-swish: ``Mul(x, Sigmoid(x))`` -> ``edgefuse::Swish(x, alpha=1)`` and
``Mul(x, Sigmoid(Mul(x, a)))`` -> ``edgefuse::Swish(x, alpha=a)`` (commuted forms too).

``Swish(x, alpha) = x * sigmoid(alpha * x)`` (see edgefuse/acl/ops/swish/spec.py), so the
rewrite is exact up to float rounding. For Ascend targets only: on the NPU one elementwise kernel
replaces two and the activation no longer makes a round trip through global memory between them;
host runtimes run the op through its ONNX function, which is the original pair of nodes.

Refused when the sigmoid's input is something else (gating: ``x * sigmoid(y)``), when the scale
inside the sigmoid is not a constant scalar, or when ``x`` is known not to be float16/float32.
An unknown dtype (a value another rewrite created earlier in the same round) is accepted.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.acl.ops.spec import DOMAIN
from edgefuse.acl.ops.swish.spec import SWISH
from edgefuse.optimize.rule import Rule, constant_array

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def _alpha(result: MatchResult, x: ir.Value, gate_in: ir.Value) -> float | None:
    """The factor inside the sigmoid (1 for SiLU), or None with the reason recorded."""
    if gate_in is x:
        return 1.0
    producer = gate_in.producer()
    scaled_x = (
        producer is not None
        and producer.op_type == "Mul"
        and producer.domain in ("", "ai.onnx")
        and x in producer.inputs
    )
    if not scaled_x:
        result.fail("the sigmoid's input is neither x nor x times a constant", gate_in)
        return None
    (scale,) = [value for value in producer.inputs if value is not x] or [x]
    array = constant_array(scale)
    if array is None:
        result.fail(f"the scale '{scale.name}' inside the sigmoid is not constant", scale)
        return None
    rank = None if x.shape is None else len(x.shape)
    if array.size != 1 or (array.ndim > 0 and (rank is None or array.ndim > rank)):
        result.fail(
            f"the scale inside the sigmoid has shape {list(array.shape)}; only a scalar "
            "that does not broadcast x becomes Swish's alpha",
            scale,
        )
        return None
    return float(array.reshape(()))


class SiluToSwish(Rule):
    id = "silu-to-swish"
    description = "fuse x * sigmoid(a * x) (SiLU when a = 1) into the edgefuse Swish custom op"
    commute = True

    def pattern(self, op, x, gate_in):
        return op.Mul(x, op.Sigmoid(gate_in))

    def check(self, context, x, gate_in) -> MatchResult:
        result = MatchResult()
        if x.dtype is not None and x.dtype not in _FLOATS:
            result.fail(f"'{x.name}' is {x.dtype}; Swish takes float16/float32", x)
            return result
        _alpha(result, x, gate_in)
        return result

    def rewrite(self, op, x, gate_in):
        alpha = _alpha(MatchResult(), x, gate_in)
        return op.Swish(x, alpha=alpha, _domain=DOMAIN, _version=SWISH.version)
