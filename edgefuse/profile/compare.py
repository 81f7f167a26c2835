"""Two profiles side by side (before and after ``optimize``): time per op type, and the time each
optimize rule saved, attributed through the rewrite's provenance.

Why through provenance and not by op-type difference: a fold changes the op mix (a BatchNorm row
disappears, a Conv gets a little slower), so "BatchNormalization went from 3 ms to 0" overstates
what folding bought. Here both profiles' rows are linked by the original nodes they stand for
(``ProfileRow.sources``; a node a rule removed outright is in ``ProfileReport.removed``): rows
linked directly or through a chain form one *group*, and a group's saving is its time before
minus its time after, credited to the rules that built the after-side's nodes (shared equally
when several rules built one group). Groups no rule touched make the "not from a rule" line:
the runtime choosing other kernels, other passes (constant folding), and noise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from edgefuse.profile.table import ProfileReport, ProfileRow

NOT_FROM_A_RULE = "(not from a rule)"


@dataclasses.dataclass
class RuleSaving:
    rule: str
    groups: int
    before_us: float
    after_us: float

    @property
    def saved_us(self) -> float:
        return self.before_us - self.after_us


@dataclasses.dataclass
class Comparison:
    before: ProfileReport
    after: ProfileReport
    op_types: list[tuple[str, float, float]]  # op type, time before, time after (us)
    savings: list[RuleSaving]

    def to_json(self) -> dict:
        return {
            "before": self.before.model, "after": self.after.model,
            "total_before_us": self.before.total_us, "total_after_us": self.after.total_us,
            "op_types": [{"op_type": op, "before_us": b, "after_us": a}
                         for op, b, a in self.op_types],
            "rules": [{**dataclasses.asdict(s), "saved_us": s.saved_us} for s in self.savings],
        }

    def render(self) -> str:
        b, a = self.before.total_us, self.after.total_us
        lines = [f"before: {self.before.model}", f"after:  {self.after.model}",
                 f"kernel time {b / 1e3:.3f} ms -> {a / 1e3:.3f} ms "
                 f"({_percent(b - a, b)} saved)", "",
                 f"{'op type':<24}{'before ms':>11}{'after ms':>10}{'delta ms':>10}"]
        for op, before, after in self.op_types:
            lines.append(f"{op[:23]:<24}{before / 1e3:>11.3f}{after / 1e3:>10.3f}"
                         f"{(after - before) / 1e3:>+10.3f}")
        lines += ["", f"{'time saved by':<32}{'groups':>7}{'before ms':>11}{'after ms':>10}"
                      f"{'saved ms':>10}{'saved':>8}"]
        for saving in self.savings:
            lines.append(f"{saving.rule[:31]:<32}{saving.groups:>7}"
                         f"{saving.before_us / 1e3:>11.3f}{saving.after_us / 1e3:>10.3f}"
                         f"{saving.saved_us / 1e3:>+10.3f}{_percent(saving.saved_us, b):>8}")
        lines.append("(saved time is before minus after per group of nodes; a negative value "
                     "means the rewritten nodes ran slower; differences under the run-to-run "
                     "noise mean nothing)")
        return "\n".join(lines)


def compare(before: ProfileReport, after: ProfileReport) -> Comparison:
    times: dict[str, list[float]] = {}
    for index, report in enumerate((before, after)):
        for group in report.by_op_type():
            times.setdefault(group.op_type, [0.0, 0.0])[index] += group.time_us
    op_types = sorted(((op, t[0], t[1]) for op, t in times.items()),
                      key=lambda item: max(item[1], item[2]), reverse=True)
    return Comparison(before, after, op_types, _savings(before, after))


def _savings(before: ProfileReport, after: ProfileReport) -> list[RuleSaving]:
    rows: list[tuple[int, ProfileRow]] = [(0, r) for r in before.rows] + \
        [(1, r) for r in after.rows]
    parent = list(range(len(rows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_with: dict[str, int] = {}
    for index, (_, row) in enumerate(rows):
        for name in _names(row):
            if name in first_with:
                parent[root(index)] = root(first_with[name])
            else:
                first_with[name] = index
    groups: dict[int, list[int]] = {}
    for index in range(len(rows)):
        groups.setdefault(root(index), []).append(index)
    totals: dict[str, RuleSaving] = {}
    for members in groups.values():
        rules = _rules(rows, members, after.removed)
        before_us = sum(rows[i][1].time_us for i in members if rows[i][0] == 0)
        after_us = sum(rows[i][1].time_us for i in members if rows[i][0] == 1)
        for rule in rules:
            saving = totals.setdefault(rule, RuleSaving(rule, 0, 0.0, 0.0))
            saving.groups += 1
            saving.before_us += before_us / len(rules)
            saving.after_us += after_us / len(rules)
    return sorted(totals.values(), key=lambda s: s.saved_us, reverse=True)


def _names(row: ProfileRow) -> Sequence[str]:
    return row.sources or row.origins or [f"<kernel {row.name}>"]


def _rules(rows, members, removed) -> list[str]:
    found: list[str] = []
    for index in members:
        side, row = rows[index]
        if side == 1:
            found += row.rules
        else:
            found += [removed[name] for name in _names(row) if name in removed]
    return list(dict.fromkeys(found)) or [NOT_FROM_A_RULE]


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"
