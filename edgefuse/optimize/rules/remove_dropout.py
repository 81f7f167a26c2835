"""remove-dropout: ``Dropout(x)`` -> ``x`` in inference mode.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class RemoveDropout(AdoptedRule):
    id = "remove-dropout"
    description = "remove Dropout in inference mode (ratio 0 or training_mode false)"
    onnxscript_rules = (onnxscript_rules.dropout_zero_rule, onnxscript_rules.dropout_inference_rule)
