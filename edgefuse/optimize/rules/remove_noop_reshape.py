"""remove-noop-reshape: ``Reshape(x, shape)`` -> ``x`` when the result has the shape ``x`` has.

The target shape is resolved the way Reshape does (``0`` copies the input dim unless
``allowzero=1``, one ``-1`` takes what is left) and compared with the static shape of ``x``.
Exporters leave these behind around flatten/view calls on already-flat tensors.
"""

from __future__ import annotations

import numpy as np
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, not_applicable, require_constants


class RemoveNoopReshape(Rule):
    id = "remove-noop-reshape"
    description = "remove a Reshape to the shape its input already has"

    def pattern(self, op, x, shape):
        return op.Reshape(x, shape, _outputs=["reshaped"])

    def check(self, context, x, shape, reshaped) -> MatchResult:
        result = MatchResult()
        if x.shape is None or not x.shape.is_static():
            return result.fail(f"the shape of '{x.name}' is not static")
        arrays = require_constants(result, shape=shape)
        if not arrays:
            return result
        dims = [int(d) for d in x.shape]
        target = [int(d) for d in arrays["shape"].reshape(-1)]
        allow_zero = reshaped.producer().attributes.get_int("allowzero", 0)
        resolved = [
            dims[i] if d == 0 and not allow_zero and i < len(dims) else d
            for i, d in enumerate(target)
        ]
        if resolved.count(-1) == 1:
            known = int(np.prod([d for d in resolved if d != -1]))
            if known:
                resolved[resolved.index(-1)] = int(np.prod(dims)) // known
        if resolved != dims:
            return not_applicable(result, f"reshape {dims} -> {target} changes the shape")
        return result

    def rewrite(self, op, x, shape, reshaped):
        return op.Identity(x)
