"""remove-noop-arithmetic: ``Mul(x, 1)``, ``Add(x, 0)``, ``Sub(x, 0)``, ``Div(x, 1)`` -> ``x``.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class RemoveNoopArithmetic(AdoptedRule):
    id = "remove-noop-arithmetic"
    description = "remove x*1, 1*x, x+0, 0+x, x-0 and x/1"
    onnxscript_rules = (
        *onnxscript_rules.mul_by_1_rule.commute(),
        *onnxscript_rules.add_0_rule.commute(),
        onnxscript_rules.sub_0_rule,
        onnxscript_rules.div_by_1_rule,
    )
