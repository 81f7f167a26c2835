"""merge-transpose-chain: ``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p1[p2])``, or ``x``
when the composition is the identity.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class MergeTransposeChain(AdoptedRule):
    id = "merge-transpose-chain"
    description = "merge two consecutive Transposes into one (or none)"
    onnxscript_rules = (onnxscript_rules.transpose_transpose_rule,)
