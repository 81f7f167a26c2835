"""fold-pad-into-conv: ``Conv(Pad(x, pads, 0))`` -> ``Conv(x)`` with ``pads`` added to the Conv's
own; only zero-valued constant padding on spatial axes, non-negative, is folded.

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class FoldPadIntoConv(AdoptedRule):
    id = "fold-pad-into-conv"
    description = "fold a constant zero Pad on spatial axes into the following Conv's pads"
    onnxscript_rules = (onnxscript_rules.fuse_pad_into_conv_rule,)
