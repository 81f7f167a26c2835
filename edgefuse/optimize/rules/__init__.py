"""The registry of rewrite rules: an explicit, ordered tuple (order = priority at a node).

Why explicit: a rule is in the list or it is not, and a test checks that every rule module is
listed exactly once with a unique id. The order matters where two rules could match at the same
node: the first in this tuple wins for that round.
"""

from __future__ import annotations

from edgefuse.optimize.rules.fold_bn_into_conv import FoldBnIntoConv

ALL_RULES = (
    FoldBnIntoConv,
)

RULES_BY_ID = {rule.id: rule for rule in ALL_RULES}
