"""ONNX Runtime's profiler output (``SessionOptions.enable_profiling``), parsed into runs.

Why parse rather than re-time: ONNX Runtime times each kernel where it runs it, inside the
executor; timing nodes from Python would need a session per node and measure something else.

The file is a JSON array of Chrome trace events. ``cat: "Session"`` events mark the session's
phases (``model_loading_*``, ``session_initialization``) and each ``model_run``; ``cat: "Node"``
events named ``<node>_kernel_time`` carry one kernel's duration in microseconds, with the op
(``args.op_name``) and the execution provider (``args.provider``). Events come per thread in
time order; a kernel belongs to the ``model_run`` whose interval holds its start.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from edgefuse.errors import EdgefuseError, Ref

_KERNEL_SUFFIX = "_kernel_time"


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One node as ONNX Runtime executed it."""

    name: str
    op: str
    provider: str


@dataclasses.dataclass
class OrtRun:
    """One ``model_run``: its wall time and each kernel's time, in microseconds."""

    start_us: float
    wall_us: float
    kernel_us: dict[str, float] = dataclasses.field(default_factory=dict)
    events: list[tuple[str, float, float]] = dataclasses.field(default_factory=list)  # name,ts,dur


@dataclasses.dataclass
class OrtTrace:
    kernels: dict[str, Kernel]
    runs: list[OrtRun]
    phases: list[tuple[str, float, float]]  # session phases: name, start, duration (us)


def read_ort_profile(path: str | os.PathLike[str]) -> OrtTrace:
    """The kernels and runs of an ONNX Runtime profile file."""
    try:
        events = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EdgefuseError(f"cannot read ONNX Runtime's profile '{path}': {exc}",
                            reference=Ref.BAD_PROFILE_FILE) from exc
    if not isinstance(events, list):
        raise EdgefuseError(f"'{path}' is not an ONNX Runtime profile (not a JSON array)",
                            reference=Ref.BAD_PROFILE_FILE)
    kernels: dict[str, Kernel] = {}
    runs: list[OrtRun] = []
    phases: list[tuple[str, float, float]] = []
    node_events: list[tuple[str, float, float]] = []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        name, start, duration = str(event.get("name", "")), float(event["ts"]), float(event["dur"])
        if event.get("cat") == "Session":
            if name == "model_run":
                runs.append(OrtRun(start, duration))
            elif name != "SequentialExecutor::Execute":
                phases.append((name, start, duration))
        elif event.get("cat") == "Node" and name.endswith(_KERNEL_SUFFIX):
            node = name[: -len(_KERNEL_SUFFIX)]
            args = event.get("args") or {}
            if node not in kernels or kernels[node].op == "?":
                kernels[node] = Kernel(node, str(args.get("op_name", "?")),
                                       str(args.get("provider", "?")))
            node_events.append((node, start, duration))
    runs.sort(key=lambda run: run.start_us)
    _assign(node_events, runs)
    return OrtTrace(kernels, runs, phases)


def _assign(node_events: list[tuple[str, float, float]], runs: list[OrtRun]) -> None:
    """File each kernel event under the run whose interval holds its start."""
    node_events.sort(key=lambda event: event[1])
    index = 0
    for node, start, duration in node_events:
        while index < len(runs) and start > runs[index].start_us + runs[index].wall_us:
            index += 1
        if index == len(runs):
            break
        run = runs[index]
        if start < run.start_us:
            continue  # a kernel outside any run (none are expected)
        run.kernel_us[node] = run.kernel_us.get(node, 0.0) + duration
        run.events.append((node, start, duration))
