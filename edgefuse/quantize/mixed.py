"""Automatic mixed precision: a small set of nodes to keep FP32 so that every output meets the gate.

How (bounded, deterministic):
0. Evaluate the forced set (policy, user list, overflowing activations) alone; if it passes, stop.
1. Rank the FP16-eligible nodes by their *isolated* error (each layer of the all-FP16 model fed
   the FP32 model's inputs, FP16 storage emulated; non-finite first). Isolated error is the
   layer's own contribution, so the ranking is not polluted by upstream error.
2. Gallop: keep the top 1, 2, 4, ... ranked nodes until the gate holds; then bisect between the
   last failing and the first passing count for the shortest passing prefix.
3. Prune: try dropping each kept node, least harmful first, and drop it if the gate still holds.
Each step is one full evaluation (convert, emulate, run every calibration sample). The search
stops at ``max_evaluations`` or ``budget_s`` and returns the best set it reached; when even keeping
every ranked node fails, no keep-FP32 set meets the gate and the result says so.

Why this shape (and not onnxconverter-common's segment bisection): the sensitive nodes in vision
models are few and isolated-error ranking finds them first, so galloping needs O(log n)
evaluations; bisection over node segments spends its evaluations on large, mostly harmless blocks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from edgefuse.quantize.policy import Decision

# Evaluation of a keep set: (lowest output cosine over samples and outputs, gate passed).
Evaluation = tuple[float, bool]


@dataclasses.dataclass(frozen=True)
class Candidate:
    node: str
    op_type: str
    score: float  # isolated relative L2 error of the node's output (inf: non-finite)
    detail: str


@dataclasses.dataclass
class SearchStep:
    kept: int
    min_cosine: float
    passed: bool
    action: str

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SearchResult:
    kept: dict[str, Decision]
    passed: bool
    min_cosine: float
    evaluations: int
    seconds: float
    stopped_by: str | None  # "max-evaluations" | "time-budget" | None
    steps: list[SearchStep]

    def to_json(self) -> dict:
        return {
            "kept": [d.to_json() for d in self.kept.values()],
            "passed": self.passed,
            "min_cosine": self.min_cosine,
            "evaluations": self.evaluations,
            "seconds": round(self.seconds, 3),
            "stopped_by": self.stopped_by,
            "steps": [s.to_json() for s in self.steps],
        }


class _Budget(Exception):
    """The search ran out of evaluations or time."""


def search_keep_set(
    rank: Callable[[], Sequence[Candidate]],
    forced: set[str],
    evaluate: Callable[[set[str]], Evaluation],
    *,
    max_evaluations: int = 40,
    budget_s: float = 600.0,
) -> SearchResult:
    """Find a short prefix of ``rank()`` (plus ``forced``) that passes ``evaluate``, then prune.

    ``forced`` nodes (policy, user, overflow) are always kept and never pruned. ``rank`` is called
    only when ``forced`` alone fails the gate (ranking costs a per-layer analysis).
    """
    start = time.perf_counter()
    steps: list[SearchStep] = []
    seen: dict[frozenset[str], Evaluation] = {}
    order: list[Candidate] = []
    by_name: dict[str, Candidate] = {}

    def run(extra: Sequence[str], action: str) -> bool:
        key = frozenset(extra)
        if key not in seen:
            if len(seen) >= max_evaluations:
                raise _Budget("max-evaluations")
            if seen and time.perf_counter() - start > budget_s:  # the first always runs
                raise _Budget("time-budget")
            seen[key] = evaluate(forced | key)
            steps.append(SearchStep(len(key), seen[key][0], seen[key][1], action))
        return seen[key][1]

    stopped_by = None
    try:
        if not run([], "policy only"):
            order.extend(c for c in rank() if c.node not in forced)
            by_name.update((c.node, c) for c in order)
            count = _gallop(order, run)
            if count is not None:
                _prune([c.node for c in order[:count]], by_name, run)
    except _Budget as exc:
        stopped_by = str(exc)
    passing = [key for key, (_, ok) in seen.items() if ok]
    if passing:
        key = min(passing, key=lambda k: (len(k), -seen[k][0]))
    else:
        key = max(seen, key=lambda k: seen[k][0])
    cosine, passed = seen[key]
    rank = {c.node: index for index, c in enumerate(order)}
    kept = {
        name: Decision(name, by_name[name].op_type, "search",
                       f"rank {rank[name] + 1}: {by_name[name].detail}")
        for name in sorted(key, key=rank.__getitem__)
    }
    return SearchResult(kept, passed, float(cosine), len(seen), time.perf_counter() - start,
                        stopped_by, steps)


def _gallop(order: Sequence[Candidate], run: Callable[[Sequence[str], str], bool]) -> int | None:
    """Shortest passing prefix length (galloping then bisection), or None if none passes."""
    failing, count = 0, 1
    while True:
        count = min(count, len(order))
        if count == 0:
            return None
        if run([c.node for c in order[:count]], f"keep top {count}"):
            break
        failing = count
        if count == len(order):
            return None
        count *= 2
    passing = count
    while passing - failing > 1:
        middle = (passing + failing) // 2
        if run([c.node for c in order[:middle]], f"bisect: keep top {middle}"):
            passing = middle
        else:
            failing = middle
    return passing


def _prune(kept: list[str], by_name, run) -> list[str]:
    """Drop kept nodes one at a time (least harmful first) while the gate still holds."""
    for name in sorted(kept, key=lambda n: by_name[n].score):
        trial = [n for n in kept if n != name]
        if trial and run(trial, f"prune {name}"):
            kept = trial
    return kept


def rank_candidates(rows, eligible: set[str]) -> list[Candidate]:
    """Eligible nodes ordered by isolated error of their outputs (worst first).

    ``rows`` are ``edgefuse.verify.layers.LayerRow``s of the all-FP16 model against the FP32
    model; a node with several outputs is scored by its worst.
    """
    scores: dict[str, Candidate] = {}
    for row in rows:
        if row.node not in eligible:
            continue
        metrics = row.isolated or row.accumulated
        score = metrics.rel_l2_error if np.isfinite(metrics.rel_l2_error) else np.inf
        detail = (
            f"isolated error of '{row.tensor}': relative L2 {score:.3g}, cosine "
            f"{metrics.cosine:.6f}" + (" (non-finite in FP16)" if np.isinf(score) else "")
        )
        if row.node not in scores or score > scores[row.node].score:
            scores[row.node] = Candidate(row.node, row.op_type, score, detail)
    return sorted(scores.values(), key=lambda c: (-c.score, c.node))
