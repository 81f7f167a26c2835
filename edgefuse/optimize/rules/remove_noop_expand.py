"""remove-noop-expand: ``Expand(x, shape(x))`` -> ``x``.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class RemoveNoopExpand(AdoptedRule):
    id = "remove-noop-expand"
    description = "remove an Expand to the shape its input already has"
    onnxscript_rules = (onnxscript_rules.no_op_expand_rule,)
