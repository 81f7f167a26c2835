"""What an optimize run did: graph size before and after, and per rule what fired and why not.

Why a structured report rather than a count: a user whose BatchNorm did not fold needs the rule,
the node and the reason ("running_var is not constant (a graph input)") to fix their export, and
CI needs the same facts as JSON to catch a rule that silently stopped firing.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter


@dataclasses.dataclass
class RuleStats:
    """Outcomes of one rule over a whole run, deduplicated by node across fixed-point rounds."""

    rule_id: str
    description: str
    applied: int = 0
    rejected: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> latest reason

    def apply(self, node: str) -> None:
        self.applied += 1
        self.rejected.pop(node, None)

    def reject(self, node: str, reason: str) -> None:
        self.rejected[node] = reason

    @property
    def matched(self) -> int:
        return self.applied + len(self.rejected)

    def rejection_counts(self) -> dict[str, int]:
        return dict(Counter(self.rejected.values()).most_common())

    def to_json(self) -> dict:
        return {
            "id": self.rule_id,
            "description": self.description,
            "matched": self.matched,
            "applied": self.applied,
            "rejected": self.rejection_counts(),
            "rejected_nodes": dict(sorted(self.rejected.items())),
        }


@dataclasses.dataclass
class PassRecord:
    """One pass of the pipeline in one fixed-point round."""

    pass_id: str
    round: int
    modified: bool
    seconds: float


@dataclasses.dataclass
class RewriteReport:
    target: str
    ops_before: dict[str, int]
    ops_after: dict[str, int] = dataclasses.field(default_factory=dict)
    rules: dict[str, RuleStats] = dataclasses.field(default_factory=dict)
    passes: list[PassRecord] = dataclasses.field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def nodes_before(self) -> int:
        return sum(self.ops_before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.ops_after.values())

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "ops_before": dict(sorted(self.ops_before.items())),
            "ops_after": dict(sorted(self.ops_after.items())),
            "rounds": self.rounds,
            "seconds": round(self.seconds, 4),
            "rules": [stats.to_json() for stats in self.rules.values()],
            "passes": [dataclasses.asdict(record) for record in self.passes],
            "notes": self.notes,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def render(self) -> str:
        """The table the CLI prints: op counts before/after, then every rule that matched."""
        lines = [
            f"optimize ({self.target}): {self.nodes_before} -> {self.nodes_after} nodes "
            f"in {self.rounds} round(s), {self.seconds:.2f} s",
            "",
            f"{'op type':<28}{'before':>8}{'after':>8}",
        ]
        for op in sorted(set(self.ops_before) | set(self.ops_after)):
            before, after = self.ops_before.get(op, 0), self.ops_after.get(op, 0)
            lines.append(f"{op:<28}{before:>8}{after:>8}")
        if not any(stats.matched for stats in self.rules.values()):
            lines += ["", "no rule matched: nothing left to fold or fuse"]
        else:
            lines += ["", f"{'rule':<32}{'matched':>8}{'applied':>8}{'rejected':>9}  why not"]
        for stats in self.rules.values():
            if stats.matched == 0:
                continue
            reasons = stats.rejection_counts()
            first = next(iter(reasons.items()), None)
            why = f"{first[1]}x {first[0]}" if first else ""
            lines.append(
                f"{stats.rule_id:<32}{stats.matched:>8}{stats.applied:>8}"
                f"{len(stats.rejected):>9}  {why}"
            )
            for reason, count in list(reasons.items())[1:]:
                lines.append(f"{'':<59}  {count}x {reason}")
        quiet = [stats.rule_id for stats in self.rules.values() if stats.matched == 0]
        if quiet:
            lines.append(f"no match: {', '.join(quiet)}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def op_counts(graph) -> dict[str, int]:
    """Op-type histogram of an onnx_ir graph (custom domains prefixed, 'edgefuse::Swish')."""
    return dict(
        Counter(
            f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
            for n in graph
        )
    )
