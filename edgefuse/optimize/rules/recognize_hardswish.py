"""recognize-hardswish: ``Clip(x + 3, 0, 6) / 6`` -> ``HardSigmoid(x, 1/6, 0.5)``, and ``x * Clip(x
+ 3, 0, 6) / 6`` or ``x * HardSigmoid(x, 1/6, 0.5)`` -> ``HardSwish(x)`` (commuted forms too).

Adopted from onnxscript's rewriter, whose rule is right for this case; edgefuse adds the id, the
registry entry and the report line.
"""

from __future__ import annotations

from onnxscript.rewriter.rules import common as onnxscript_rules

from edgefuse.optimize.rule import AdoptedRule


class RecognizeHardSwish(AdoptedRule):
    id = "recognize-hardswish"
    description = "recognise HardSigmoid/HardSwish spelled out as Add, Clip, Div and Mul"
    onnxscript_rules = (*onnxscript_rules.fuse_hardswish_rules().rules,)
