"""remove-noop-transpose: ``Transpose(x, perm=[0, 1, ..., n-1])`` -> ``x``.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class RemoveNoopTranspose(AdoptedRule):
    id = "remove-noop-transpose"
    description = "remove a Transpose whose permutation is the identity"
    onnxscript_rules = (onnxscript_rules.no_op_transpose_rule,)
