"""remove-dropout: ``Dropout(x)`` -> ``x`` when the model says it runs in inference mode.

From opset 12, Dropout is the identity unless its ``training_mode`` input is true, and also in
training mode when its ``ratio`` is 0 (nothing is dropped, nothing rescaled). Before opset 12 the
model carries no training switch (a runtime decides), so only ``ratio=0`` (or ``is_test=1``,
opset < 7) says the node is the identity.

onnxscript's two rules spell these as attribute patterns (``Dropout(x, ratio=0.0)``,
``Dropout(x, training_mode=False)``); a Dropout that does not fit simply does not match, so the
report never said why a Dropout stayed, and ``training_mode`` has been an input, not an attribute,
since opset 12, so the second pattern never matched a real model. Here every Dropout matches and
the check says, for the one that stays, what keeps it: training mode, a training switch computed
at run time, or a non-zero ratio with no switch at all.

A Dropout whose mask output is read is not removed (the matcher's refusal: a value read outside
the pattern).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import Rule, constant_array

# The first opset whose Dropout takes ratio and training_mode as inputs.
_INPUT_FORM = 12


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if len(node.inputs) > index else None


def _describe(value: ir.Value) -> str:
    where = "a graph input" if value.is_graph_input() else "computed at run time"
    return f"'{value.name}' is not constant ({where})"


def _ratio_is_zero(node: ir.Node, opset: int) -> bool:
    if opset < _INPUT_FORM:
        return node.attributes.get_float("ratio", 0.5) == 0.0
    ratio = _input(node, 1)
    array = constant_array(ratio) if ratio is not None else None
    return array is not None and array.size == 1 and float(array.item()) == 0.0


def why_not_identity(node: ir.Node, opset: int) -> str | None:
    """Why ``node`` (a Dropout) may differ from its input, or None when it is the identity."""
    if _ratio_is_zero(node, opset):
        return None
    name = node.name or node.outputs[0].name
    if opset < _INPUT_FORM:
        if node.attributes.get_int("is_test", 0):
            return None
        ratio = node.attributes.get_float("ratio", 0.5)
        return (
            f"Dropout '{name}' has ratio {ratio:g}, and at opset {opset} it has no "
            f"training_mode input to say it runs in inference mode; before opset {_INPUT_FORM} "
            "only a ratio-0 Dropout is removed"
        )
    training = _input(node, 2)
    if training is None:
        return None
    flag = constant_array(training)
    if flag is None:
        return (
            f"Dropout '{name}' may run in training mode: its training_mode input "
            f"{_describe(training)}"
        )
    if bool(flag.item()):
        return f"Dropout '{name}' is in training mode (training_mode '{training.name}' is true)"
    return None


class RemoveDropout(Rule):
    id = "remove-dropout"
    description = "remove Dropout in inference mode (training_mode false/absent, or ratio 0)"

    def pattern(self, op, x):
        return op.Dropout(
            x, _allow_other_inputs=True, _allow_other_attributes=True, _outputs=["dropped"]
        )

    def check(self, context, x, dropped) -> MatchResult:
        result = MatchResult()
        opset = context.graph_or_function.opset_imports.get("", _INPUT_FORM)
        reason = why_not_identity(dropped.producer(), opset)
        return result if reason is None else result.fail(reason)

    def rewrite(self, op, x, dropped):
        return op.Identity(x)
