"""--compare: time per op type side by side, and the time each rule saved, attributed through
provenance; on hand-made reports (exact numbers) and on a real before/after pair."""

from __future__ import annotations

import pytest

from edgefuse.profile.compare import NOT_FROM_A_RULE, compare
from edgefuse.profile.run import profile
from edgefuse.profile.table import ProfileReport, ProfileRow
from tests.profile.models import saved_pair

pytestmark = pytest.mark.unit


def _row(name, op, time_us, origins, sources=None, rules=()):
    return ProfileRow(name=name, kernel_ops=op, op_type=op, origins=list(origins),
                      sources=list(sources if sources is not None else origins),
                      rules=list(rules), time_us=time_us, flops=0, bytes=0, unit="vector")


def _report(rows, removed=None):
    return ProfileReport(model="m", backend="cpu", runs=1, warmup=0, rows=rows,
                         wall_us=sum(r.time_us for r in rows), removed=removed or {})


def test_each_rule_is_credited_with_its_groups_before_minus_after():
    before = _report([_row("conv", "Conv", 100, ["conv"]), _row("bn", "BatchNormalization", 30,
                                                                   ["bn"]),
                      _row("drop", "Dropout", 5, ["drop"]), _row("relu", "Relu", 10, ["relu"])])
    after = _report([_row("conv", "Conv", 104, ["conv"], ["conv", "bn"], ["fold-bn-into-conv"]),
                     _row("relu", "Relu", 9, ["relu"])], removed={"drop": "remove-dropout"})
    result = compare(before, after)
    saved = {s.rule: s.saved_us for s in result.savings}
    assert saved == {"fold-bn-into-conv": pytest.approx(26), "remove-dropout": pytest.approx(5),
                     NOT_FROM_A_RULE: pytest.approx(1)}
    by_op = {op: (b, a) for op, b, a in result.op_types}
    assert by_op["BatchNormalization"] == (30, 0) and by_op["Conv"] == (100, 104)


def test_a_group_built_by_two_rules_shares_its_saving_equally():
    before = _report([_row("conv", "Conv", 50, ["conv"]), _row("mul", "Mul", 10, ["mul"])])
    after = _report([_row("conv", "Conv", 50, ["conv"], ["conv", "mul"],
                          ["fold-bn-into-conv", "fold-mul-into-conv"])])
    saved = {s.rule: s.saved_us for s in compare(before, after).savings}
    assert saved == {"fold-bn-into-conv": pytest.approx(5), "fold-mul-into-conv": pytest.approx(5)}


@pytest.mark.ort
def test_a_real_before_and_after_pair_credits_fold_bn_into_conv(tmp_path):
    before_path, after_path = saved_pair(tmp_path)
    result = compare(profile(before_path, "cpu", runs=2, warmup=1),
                     profile(after_path, "cpu", runs=2, warmup=1))
    rules = {s.rule for s in result.savings}
    assert "fold-bn-into-conv" in rules
    assert "time saved by" in result.render()
