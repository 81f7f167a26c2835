"""The shape every edgefuse rewrite rule has: an id, a pattern, a check that explains a refusal,
and a rewrite.

Why on top of onnxscript's rewriter: its matcher, commutation and replacement machinery are solid
and maintained; what edgefuse adds is a stable kebab-case id per rule (for ``--only``/``--skip``,
the report and the node tag), an ``exact`` flag, and shared precondition helpers so that every rule
refuses the classic unsafe cases (weights that are not constant, weights shared with a node outside
the match, graph inputs used as weights) with the same wording in the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult, RewriteRule, RewriteRuleClassBase


class Rule(RewriteRuleClassBase):
    """Base of edgefuse's own rules; subclasses define ``pattern``, ``check`` and ``rewrite``.

    A subclass may set ``commute = True`` to also match commutative variants of its pattern
    (``Mul(x, c)`` and ``Mul(c, x)``).
    """

    id: ClassVar[str]
    description: ClassVar[str]
    exact: ClassVar[bool] = True
    commute: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__(name=self.id)

    @classmethod
    def rewrite_rules(cls) -> Sequence[RewriteRule]:
        """The onnxscript rules this edgefuse rule is made of (commuted variants included)."""
        rule = cls.rule()
        return rule.commute() if cls.commute else [rule]

    def check(self, context, **bindings) -> MatchResult:  # noqa: ARG002 - default accepts all
        return MatchResult()


class AdoptedRule:
    """An edgefuse id and description around rules onnxscript already ships.

    Why: where onnxscript's rule is right (no-op and chain eliminations), re-writing it would only
    add bugs; adopting it still gives it an id, a place in the registry and a line in the report.
    """

    id: ClassVar[str]
    description: ClassVar[str]
    exact: ClassVar[bool] = True
    onnxscript_rules: ClassVar[tuple[RewriteRule, ...]]

    @classmethod
    def rewrite_rules(cls) -> Sequence[RewriteRule]:
        return cls.onnxscript_rules


# --- precondition helpers shared by the rules -------------------------------------------------


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant content (initializer or Constant node), or None.

    An initializer that is also a graph input is only a default the caller may override (ONNX
    Runtime feeds it from the inputs), so folding it would silently ignore what the caller feeds.
    """
    if value is None or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def require_constants(result: MatchResult, **values: ir.Value | None) -> dict[str, np.ndarray]:
    """Fetch constant arrays, or mark the match failed naming the first non-constant value."""
    arrays: dict[str, np.ndarray] = {}
    for role, value in values.items():
        if value is None:
            continue
        array = constant_array(value)
        if array is None:
            where = "a graph input" if value.is_graph_input() else "computed at run time"
            result.fail(f"{role} '{value.name}' is not constant ({where})", value)
            return {}
        arrays[role] = array
    return arrays


# A check that fails with this prefix says the pattern's shape matched but its premise does not hold
# (a residual Add of two computed tensors is not "an Add of a constant"); the report leaves such
# nodes out instead of listing every residual Add of a ResNet as a refused fold.
NOT_APPLICABLE = "not applicable: "


def not_applicable(result: MatchResult, why: str) -> MatchResult:
    """Fail the match without reporting it as a refusal."""
    return result.fail(NOT_APPLICABLE + why)


def require_folded_operand(result: MatchResult, role: str, value: ir.Value) -> np.ndarray | None:
    """The constant a rule exists to fold, or None: not applicable when it is computed at run time.

    A graph input that is also an initializer stays a reported refusal: the user may well expect
    that default to fold, and needs to hear why it does not.
    """
    array = constant_array(value)
    if array is None:
        if value.is_graph_input():
            result.fail(f"{role} '{value.name}' is not constant (a graph input)", value)
        else:
            not_applicable(result, f"{role} '{value.name}' is computed at run time")
    return array


def require_unshared(
    result: MatchResult, matched_nodes: Iterable[ir.Node], **values: ir.Value | None
) -> bool:
    """Refuse when a weight is also read by a node outside the match.

    Folding writes new weights; if the old initializer also feeds another node, rewriting it in
    place would silently change that node too (OnnxSlim's classic bug), so such matches are
    refused rather than duplicated.
    """
    inside = set(matched_nodes)
    for role, value in values.items():
        if value is None:
            continue
        for user, _ in value.uses():
            if user not in inside:
                user_name = user.name or f"<unnamed {user.op_type}>"
                result.fail(
                    f"{role} '{value.name}' is shared with node '{user_name}' outside the match",
                    value,
                )
                return False
    return True


def data_and_constant(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The (data, constant) operands of a commutative op, in whichever order the graph has them.

    Why not commuted patterns: when both operands are free pattern variables, both variants
    match, and the refusal of the variant that binds the data as the constant ("'x' is not
    constant") would overwrite the reason that matters in the report.
    """
    if constant_array(a) is not None and constant_array(b) is None:
        return b, a
    return a, b


def float_dtype(result: MatchResult, value: ir.Value) -> bool:
    """Folding is defined here for float32/float64 tensors only."""
    if value.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
        result.fail(f"'{value.name}' is {value.dtype}; only float32/float64 are folded", value)
        return False
    return True


def make_constant(op, array: np.ndarray, name: str) -> ir.Value:
    """A new initializer-backed constant for a replacement subgraph."""
    return op.initializer(ir.tensor(np.ascontiguousarray(array), name=name), name=name)
