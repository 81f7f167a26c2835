"""A profile as a Chrome trace-event file: opens in chrome://tracing, Perfetto and speedscope.

Why this format: it is the one ONNX Runtime itself writes and every trace viewer reads (the
Trace Event Format, "JSON Object Format" with ``traceEvents``). One process per profiled model,
one track (thread) per stage: the session's phases (load, initialise), the runs, the kernels
inside them, and, when a SoC was given, the board's floor laid end to end under the first timed
run, labelled as the lower bound it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from edgefuse._files import write_text
from edgefuse.profile.table import FLOOR_LABEL, ProfileReport

_TRACKS = ("session", "runs", "kernels", FLOOR_LABEL)


def trace_events(reports: Sequence[ProfileReport]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid, report in enumerate(reports, start=1):
        events.append(_meta(pid, 0, "process_name", f"{report.model} ({report.backend})"))
        for tid, track in enumerate(_TRACKS, start=1):
            events.append(_meta(pid, tid, "thread_name", track))
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                           "args": {"sort_index": tid}})
        for name, start, duration in report.phases:
            events.append(_span(pid, 1, name, start, duration, "session"))
        for index, (start, duration) in enumerate(report.run_spans):
            events.append(_span(pid, 2, f"run {index + 1}", start, duration, "run"))
        kernel_ops = {kernel: row for row in report.rows for kernel in row.name.split("+")}
        for run in report.run_events:
            for kernel, start, duration in run:
                row = kernel_ops.get(kernel)
                args = {"op": row.kernel_ops, "stands_for": row.origins} if row else {}
                events.append({**_span(pid, 3, kernel, start, duration, "kernel"), "args": args})
        if report.soc and report.run_spans:
            clock = report.run_spans[0][0]
            for row in report.rows:
                if row.floor_us is None:
                    continue
                events.append({**_span(pid, 4, row.name, clock, row.floor_us, "floor"),
                               "args": {"lower_bound_on": report.soc,
                                        "memory_bound": row.memory_bound}})
                clock += row.floor_us
    return events


def write_trace(path: str | os.PathLike[str], reports: Sequence[ProfileReport]) -> None:
    """Write the trace atomically (a temporary file renamed into place)."""
    document = {"traceEvents": trace_events(reports), "displayTimeUnit": "ms",
                "otherData": {"floor": "a lower bound on the board's time, not a prediction"}}
    write_text(path, json.dumps(document) + "\n")


def _meta(pid: int, tid: int, name: str, value: str) -> dict[str, Any]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {"name": value}}


def _span(pid: int, tid: int, name: str, start: float, duration: float,
          category: str) -> dict[str, Any]:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": category,
            "ts": round(start, 3), "dur": round(max(duration, 0.0), 3)}
