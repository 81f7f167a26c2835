"""CANN's board profile: ``op_summary_*.csv`` from ``msprof``, parsed into the profile's table.

Why this file: it is msprof's per-task summary, one row per task the board ran, with the op's
name and type, the task's duration and the accelerator that ran it. The columns read here are
those of CANN 7.0's documentation of the file (MindStudio 7.0 "op_summary (Operator Details)",
https://www.hiascend.com/document/detail/en/mindstudio/700/TITools/Profiling/
atlasprofiling_16_0067.html, and the zh page canncommercial/700/devtools/auxiliarydevtool/
atlasprofiling_16_0201.html); later versions (CANN 8.x, same page id) keep these names. Which
other columns exist depends on ``--aic-metrics`` and the product, so only these are required:

- ``Op Name``, ``OP Type``, ``Task Duration(us)`` (the task's time on the device, scheduling
  included);
and these are used when present: ``Task Type`` (AI_CORE, AI_VECTOR_CORE, AI_CPU, ...),
``Task Start Time(us)`` (the order of execution).

At ``--task-time=l0`` only ``OP Type`` and ``Task Type`` are not collected and read ``N/A``
(``Block Dim`` reads 0); ``Task Duration`` is there at l0 as at l1 (CANN 8.0 profiling docs,
op_summary field table: hiascend CANNCommunityEdition/80RC1alpha001 devaids/auxiliarydevtool/
atlasprofiling_16_0165.html). So an l0 file is read, its op types as ``N/A``, and the ops are
still named by ``Op Name`` (which is what ties them to the model's nodes).

An op appears once per inference; the first ``warmup`` occurrences of each are dropped and the
median of the rest is its time. A ``Task Duration`` that is not a number is an error: there is
nothing to profile without it.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from pathlib import Path

from edgefuse.errors import EdgefuseError, Ref

REQUIRED = ("Op Name", "OP Type", "Task Duration(us)")


@dataclasses.dataclass
class BoardTask:
    """One op of the board profile: its type, the unit that ran it, its time per inference."""

    name: str
    op_type: str
    task_type: str
    durations_us: list[float]
    first_start_us: float


def read_op_summary(path: str | os.PathLike[str]) -> list[BoardTask]:
    """The ops of an ``op_summary_*.csv``, in execution order."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            columns = [name.strip() for name in reader.fieldnames or ()]
            missing = [name for name in REQUIRED if name not in columns]
            if missing:
                raise EdgefuseError(
                    f"'{path}' is not an msprof op_summary file: no column "
                    + ", ".join(repr(m) for m in missing),
                    hint="give the op_summary_*.csv that `msprof --export=on` writes "
                         "(under PROF_*/device_*/summary or mindstudio_profiler_output)",
                    reference=Ref.BAD_PROFILE_FILE)
            tasks: dict[str, BoardTask] = {}
            for line, raw in enumerate(reader, start=2):
                row = {key.strip(): (value or "").strip() for key, value in raw.items() if key}
                _add(tasks, row, path, line)
    except OSError as exc:
        raise EdgefuseError(f"cannot read '{path}': {exc.strerror or exc}",
                            reference=Ref.BAD_PROFILE_FILE) from exc
    return sorted(tasks.values(), key=lambda task: task.first_start_us)


def _add(tasks: dict[str, BoardTask], row: dict[str, str], path, line: int) -> None:
    name = row["Op Name"]
    try:
        duration = float(row["Task Duration(us)"])
    except ValueError as exc:
        raise EdgefuseError(
            f"{path}:{line}: Task Duration(us) of '{name}' is {row['Task Duration(us)']!r}",
            hint="collect with task time on (msprof --task-time=on, the default, or l0/l1) "
                 "and export again (msprof --export=on)",
            reference=Ref.BAD_PROFILE_FILE) from exc
    start = _number(row.get("Task Start Time(us)"), default=float(line))
    task = tasks.get(name)
    if task is None:
        tasks[name] = BoardTask(name, row["OP Type"], row.get("Task Type", ""), [duration],
                                start)
    else:
        task.durations_us.append(duration)
        task.first_start_us = min(task.first_start_us, start)


def _number(text: str | None, *, default: float) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


def find_op_summary(folder: str | os.PathLike[str]) -> Path:
    """The op_summary CSV msprof exported under ``folder`` (the newest when there are several)."""
    found = sorted(Path(folder).rglob("op_summary*.csv"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise EdgefuseError(f"msprof wrote no op_summary_*.csv under '{folder}'",
                            hint="check msprof's log above; the model must run on the NPU while "
                                 "msprof collects",
                            reference=Ref.BAD_PROFILE_FILE)
    return found[-1]
