"""The board profile: a BUILD_DIR run on the NPU under CANN's ``msprof``, parsed into the table.

Why msprof on the application rather than the ``acl.prof`` API inside this process: pyACL's
profiling calls must come after ``acl.init`` and before the model loads (CANN 8.0.RC3, "pyACL
API采集并落盘性能数据", atlasprofiling_16_0049), which is inside the shared ACL runtime every
AclSession uses; running the same ``edgefuse bench --backend acl`` under msprof (``msprof
--application=... --output=DIR``, which collects task time by default and exports the summary
CSVs when the application ends) measures exactly what bench measures, with nothing wired into
the runtime. The summary is then read by ``msprof.read_op_summary``.

Not run here: this machine has no NPU and no CANN; the flow is tested with a stand-in msprof
and the parser with a sample in the documented format. Ops are matched to the model's nodes by
name (ATC keeps an ONNX node's name for the op it becomes); an op ATC fused under a new name has
no origin in the table (CANN's fusion_op_*.csv, which lists the original ops, is not read yet).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import onnx

from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import InputError, Ref, ToolError
from edgefuse.model_source import resolve_source
from edgefuse.optimize import provenance
from edgefuse.profile.cost import tensor_infos
from edgefuse.profile.msprof import BoardTask, find_op_summary, read_op_summary
from edgefuse.profile.roofline import node_floor
from edgefuse.profile.segments import model_nodes
from edgefuse.profile.socs import SocPeaks
from edgefuse.profile.table import ProfileReport, ProfileRow, median


def profile_on_board(build_dir: str | os.PathLike[str], *, runs: int, warmup: int,
                     peaks: SocPeaks | None, inputs: str | None = None, device_id: int = 0,
                     msprof: str | None = None, timeout: float = 1800.0) -> ProfileReport:
    """Run ``edgefuse bench BUILD_DIR --backend acl`` under msprof and read its op summary."""
    source = resolve_source(build_dir)
    if source.manifest is None or source.om is None:
        raise InputError(f"{source.label} is not a BUILD_DIR with an OM",
                         hint="board profiling runs the OM `edgefuse compile` wrote",
                         reference=Ref.BAD_BUILD_DIR)
    executable = msprof or shutil.which("msprof")
    if executable is None:
        raise ToolError(
            "msprof is not on PATH: board profiling runs the model under CANN's profiler",
            hint="on the board, source the CANN environment first (source "
                 "/usr/local/Ascend/ascend-toolkit/set_env.sh); host backends profile "
                 "without it (--backend cpu|cuda|sim)",
            reference=Ref.CANN_NOT_FOUND)
    application = [sys.executable, "-m", "edgefuse", "bench", str(build_dir), "--backend", "acl",
                   "--warmup", str(warmup), "--iterations", str(runs), "--no-onnxruntime",
                   "--no-progress", "--device-id", str(device_id)]
    if inputs is not None:
        application += ["--inputs", str(inputs)]
    with tempfile.TemporaryDirectory(prefix="edgefuse-msprof-") as folder:
        command = [executable, f"--application={shlex.join(application)}",
                   f"--output={folder}", "--task-time=on"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ToolError(f"msprof could not run: {exc}", reference=Ref.TOOL_FAILED) from exc
        if done.returncode != 0:
            raise ToolError(f"msprof exited with {done.returncode}",
                            context=(done.stderr or done.stdout).strip()[-2000:] or None,
                            hint="the command was: " + shlex.join(command),
                            reference=Ref.TOOL_FAILED)
        tasks = read_op_summary(find_op_summary(folder))
    model = load_model(source.onnx) if source.onnx is not None else None
    return board_report(tasks, model, label=source.label, warmup=warmup, peaks=peaks)


def board_report(tasks: Sequence[BoardTask], model: onnx.ModelProto | None, *, label: str,
                 warmup: int, peaks: SocPeaks | None) -> ProfileReport:
    """The table of a board profile; ops named like a node of ``model`` get its FLOPs, bytes
    and floor."""
    nodes = {}
    if model is not None:
        nodes = {node.key: node for node in model_nodes(model, tensor_infos(model))}
    rows = []
    per_run: list[float] = []
    for task in tasks:
        timed = task.durations_us[warmup:] or task.durations_us
        per_run.append(median(timed))
        node = nodes.get(task.name)
        row = ProfileRow(
            name=task.name, kernel_ops=f"{task.op_type} ({task.task_type or '?'})",
            op_type=task.op_type, origins=[task.name] if node else [],
            sources=provenance.origins(node.node) if node else [],
            rules=provenance.rules(node.node) if node else [],
            time_us=per_run[-1], flops=node.cost.flops if node else None,
            bytes=node.cost.bytes if node else 0, unit=node.cost.unit if node else "vector")
        if peaks is not None and node is not None:
            floor = node_floor(peaks, flops=row.flops, bytes_moved=row.bytes, unit=row.unit)
            row.floor_us, row.memory_bound = floor.seconds * 1e6, floor.memory_bound
        rows.append(row)
    runs = min((len(t.durations_us) for t in tasks), default=0)
    report = ProfileReport(model=label, backend="acl (msprof)", runs=max(runs - warmup, 0),
                           warmup=warmup, rows=rows, wall_us=sum(per_run))
    if peaks is not None:
        report.soc, report.soc_sources, report.soc_notes = peaks.soc, list(peaks.sources), \
            list(peaks.notes)
    unmatched = sum(1 for row in rows if not row.origins)
    if unmatched:
        report.notes.append(f"{unmatched} board op(s) have no node of that name in the model "
                            "(fused or inserted by ATC): no FLOPs, bytes or floor for them")
    report.notes.append("whole-run time is the sum of the ops' task durations (msprof)")
    return report
