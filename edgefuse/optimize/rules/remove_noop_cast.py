"""remove-noop-cast: ``Cast(x, to=dtype(x))`` -> ``x``.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class RemoveNoopCast(AdoptedRule):
    id = "remove-noop-cast"
    description = "remove a Cast to the dtype its input already has"
    onnxscript_rules = (onnxscript_rules.no_op_cast_rule,)
