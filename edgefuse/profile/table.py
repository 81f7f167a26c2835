"""The profile's table: per executed node and per op type, time, share, FLOPs, bytes, rates and
the board's floor, rendered for a terminal and as JSON.

Why one row type for every backend: a host profile (ONNX Runtime) and a board profile (msprof)
answer the same question, and ``--compare`` and the floor must not care which produced a row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

FLOOR_LABEL = "floor (lower bound)"


@dataclasses.dataclass
class ProfileRow:
    """One executed node (an ONNX Runtime kernel group or a board task) and what it stands for."""

    name: str  # the executed node(s), '+'-joined
    kernel_ops: str  # the ops that ran, '+'-joined ("FusedConv", "Conv+ReorderOutput")
    op_type: str  # the model op doing the most work in it
    origins: list[str]  # nodes of the profiled model it stands for
    sources: list[str]  # nodes of the model before optimize (through provenance)
    rules: list[str]  # optimize rules that built its nodes
    time_us: float  # median over the timed runs
    flops: int | None
    bytes: int
    unit: str
    floor_us: float | None = None
    memory_bound: bool | None = None

    @property
    def gflops_per_s(self) -> float | None:
        if self.flops is None or self.time_us <= 0:
            return None
        return self.flops / self.time_us / 1e3

    @property
    def gbytes_per_s(self) -> float | None:
        return self.bytes / self.time_us / 1e3 if self.time_us > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "gflops_per_s": self.gflops_per_s,
                "gbytes_per_s": self.gbytes_per_s}


@dataclasses.dataclass
class OpTypeRow:
    op_type: str
    count: int
    time_us: float
    flops: int | None
    bytes: int
    floor_us: float | None


@dataclasses.dataclass
class ProfileReport:
    """What ``edgefuse profile`` measured on one model and backend."""

    model: str
    backend: str
    runs: int
    warmup: int
    rows: list[ProfileRow]
    wall_us: float  # median of the whole runs as the profiler timed them
    soc: str | None = None
    soc_notes: list[str] = dataclasses.field(default_factory=list)
    soc_sources: list[str] = dataclasses.field(default_factory=list)
    folded_away: list[str] = dataclasses.field(default_factory=list)  # model nodes never run
    removed: dict[str, str] = dataclasses.field(default_factory=dict)  # by optimize: node -> rule
    notes: list[str] = dataclasses.field(default_factory=list)
    phases: list[tuple[str, float, float]] = dataclasses.field(default_factory=list)
    run_events: list[list[tuple[str, float, float]]] = dataclasses.field(default_factory=list)
    run_spans: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    @property
    def total_us(self) -> float:
        return sum(row.time_us for row in self.rows)

    @property
    def floor_us(self) -> float | None:
        floors = [row.floor_us for row in self.rows if row.floor_us is not None]
        return sum(floors) if floors else None

    def by_op_type(self) -> list[OpTypeRow]:
        groups: dict[str, OpTypeRow] = {}
        for row in self.rows:
            group = groups.setdefault(row.op_type, OpTypeRow(row.op_type, 0, 0.0, 0, 0, 0.0))
            group.count += 1
            group.time_us += row.time_us
            group.flops = None if group.flops is None or row.flops is None \
                else group.flops + row.flops
            group.bytes += row.bytes
            group.floor_us = None if group.floor_us is None or row.floor_us is None \
                else group.floor_us + row.floor_us
        return sorted(groups.values(), key=lambda g: g.time_us, reverse=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "backend": self.backend, "runs": self.runs,
            "warmup": self.warmup, "total_us": self.total_us, "wall_us": self.wall_us,
            "soc": self.soc, "floor_is": "a lower bound on the board's time, not a prediction",
            "floor_us": self.floor_us, "soc_sources": self.soc_sources,
            "soc_notes": self.soc_notes,
            "op_types": [dataclasses.asdict(group) for group in self.by_op_type()],
            "nodes": [row.to_json() for row in self.rows],
            "folded_away": self.folded_away, "removed_by_optimize": self.removed,
            "notes": self.notes,
        }

    def render(self, top: int | None = 25) -> str:
        total = self.total_us or 1.0
        floor_head = f"{'floor us':>9} {'mem':>3} " if self.soc else ""
        lines = [
            f"{self.model}: backend {self.backend}, median of {self.runs} run(s) after "
            f"{self.warmup} warm-up; kernels {self.total_us / 1e3:.3f} ms, whole run "
            f"{self.wall_us / 1e3:.3f} ms",
        ]
        if self.soc:
            floor = self.floor_us
            lines.append(f"board floor on {self.soc}: "
                         + (f"{floor / 1e3:.3f} ms" if floor is not None else "n/a")
                         + " -- a LOWER BOUND from published peaks, not a prediction")
        lines += ["", f"{'op type':<24}{'count':>6}{'time ms':>10}{'share':>7}{'GFLOP':>9}"
                      f"{'MB':>9}{'GFLOP/s':>9}{'GB/s':>7}"
                      + (f"{'floor ms':>10}" if self.soc else "")]
        for group in self.by_op_type():
            lines.append(
                f"{group.op_type[:23]:<24}{group.count:>6}{group.time_us / 1e3:>10.3f}"
                f"{100 * group.time_us / total:>6.1f}%{_g(group.flops, 1e9):>9}"
                f"{group.bytes / 1e6:>9.2f}{_rate(group.flops, group.time_us):>9}"
                f"{_rate(group.bytes, group.time_us):>7}"
                + (f"{_g(group.floor_us, 1e3, 3):>10}" if self.soc else ""))
        rows = sorted(self.rows, key=lambda r: r.time_us, reverse=True)
        shown = rows if top is None else rows[:top]
        lines += ["", f"{'node':<34}{'op':<12}{'time us':>9}{'share':>7}{'GFLOP/s':>9}"
                      f"{'GB/s':>7} {floor_head}stands for"]
        for row in shown:
            floor = ""
            if self.soc:
                floor = f"{_g(row.floor_us, 1, 1):>9} {'yes' if row.memory_bound else '':>3} "
            lines.append(
                f"{row.name[:33]:<34}{row.op_type[:11]:<12}{row.time_us:>9.1f}"
                f"{100 * row.time_us / total:>6.1f}%{_rate(row.flops, row.time_us):>9}"
                f"{_rate(row.bytes, row.time_us):>7} {floor}{_stands_for(row)}")
        if top is not None and len(rows) > top:
            lines.append(f"... {len(rows) - top} more node(s) (--top 0 shows all, --json has all)")
        if self.folded_away:
            lines.append(f"never run (folded by the runtime): {len(self.folded_away)} node(s)")
        lines += [f"note: {note}" for note in (*self.soc_notes, *self.notes)]
        return "\n".join(lines)


def _stands_for(row: ProfileRow) -> str:
    names = row.sources if row.sources else row.origins
    text = ", ".join(names) if names else "-"
    if row.rules:
        text += f"  [{', '.join(row.rules)}]"
    return text if len(text) <= 70 else text[:67] + "..."


def _g(value: float | None, scale: float, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value / scale:.{digits}f}"


def _rate(amount: float | None, time_us: float) -> str:
    if amount is None or time_us <= 0:
        return "n/a"
    return f"{amount / time_us / 1e3:.1f}"


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
