"""merge-unsqueeze-chain: ``Unsqueeze(Unsqueeze(x, a1), a2)`` -> ``Unsqueeze(x, a)`` with the
combined constant axes.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class MergeUnsqueezeChain(AdoptedRule):
    id = "merge-unsqueeze-chain"
    description = "merge Unsqueeze(Unsqueeze(x)) into one Unsqueeze"
    onnxscript_rules = (onnxscript_rules.unsqueeze_unsqueeze_rule,)
