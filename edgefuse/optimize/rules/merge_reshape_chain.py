"""merge-reshape-chain: ``Reshape(Reshape(x, s1), s2)`` -> ``Reshape(x, s2)`` when ``s2`` is
constant and free of ``0`` copies that would read the intermediate shape.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class MergeReshapeChain(AdoptedRule):
    id = "merge-reshape-chain"
    description = "merge Reshape(Reshape(x)) into one Reshape"
    onnxscript_rules = (onnxscript_rules.reshape_reshape_rule,)
