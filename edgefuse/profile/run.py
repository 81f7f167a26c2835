"""``profile``: run a model under its backend's own profiler and build the table.

Why through ``open_session``: the profile must measure what ``run`` and ``bench`` run, with the
same session options and the same backend choice, so the session is opened exactly as they open
it, with ONNX Runtime's profiler switched on (``profile=FOLDER``). Warm-up runs are profiled
too (the profiler is on from the start) and dropped; each node's time is the median over the
timed runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edgefuse._checks import integer_at_least
from edgefuse._files import check_output_path
from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import BackendUnavailableError, InputError, Ref
from edgefuse.fallback.ort_session import PROFILED_GRAPH
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.optimize import provenance
from edgefuse.profile.chrome_trace import write_trace
from edgefuse.profile.cost import tensor_infos
from edgefuse.profile.ort_trace import OrtTrace, read_ort_profile
from edgefuse.profile.roofline import PRECISION_BYTES, node_floor
from edgefuse.profile.segments import ModelNode, Segment, model_nodes, segments
from edgefuse.profile.socs import SocPeaks, soc_peaks
from edgefuse.profile.table import ProfileReport, ProfileRow, median
from edgefuse.quantize.int8 import quantizable_layers
from edgefuse.reference.feeds import FeedSource, feed_set
from edgefuse.runtime import BACKENDS, open_session

HOST_BACKENDS = ("cpu", "cuda", "tensorrt", "sim")
DEFAULT_RUNS = 10
DEFAULT_WARMUP = 3


def profile(
    model: str | os.PathLike[str] | onnx.ModelProto | ModelSource,
    backend: str = "cpu",
    *,
    inputs: FeedSource | None = None,
    batch: int | None = None,
    runs: int = DEFAULT_RUNS,
    warmup: int = DEFAULT_WARMUP,
    soc: str | None = None,
    precision: str = "fp16",
    keep_fp16: Collection[str] = (),
    trace: str | os.PathLike[str] | None = None,
    seed: int = 0,
    **options: Any,
) -> ProfileReport:
    """Profile ``model`` on ``backend`` (cpu, cuda, tensorrt, sim; the board: ``acl``).

    With ``soc``, every node gets the board's floor on that SoC (a lower bound, ``roofline``);
    under ``precision="int8"`` the quantizable layers compute at the INT8 peak except those in
    ``keep_fp16`` (the ``quantize --int8 --keep-fp16`` names), which stay at the FP16 peak.
    With ``trace``, a Chrome trace-event file is written there (atomically). ``options`` go to
    ``open_session`` (threads, device_id, soc/memory for sim, ...).
    """
    integer_at_least("runs", runs, 1)
    integer_at_least("warmup", warmup, 0)
    if backend not in BACKENDS:
        raise InputError(f"unknown backend '{backend}'", hint=f"one of {', '.join(BACKENDS)}",
                         reference=Ref.UNKNOWN_BACKEND)
    if precision not in PRECISION_BYTES:
        raise InputError(f"unknown board precision '{precision}'",
                         hint=f"one of {', '.join(PRECISION_BYTES)}", reference=Ref.BAD_ARGUMENT)
    keep_fp16 = tuple(keep_fp16)
    if keep_fp16 and precision != "int8":
        raise InputError("layers kept FP16 only mean something under --precision int8",
                         hint="add --precision int8, or drop --keep-fp16",
                         reference=Ref.BAD_ARGUMENT)
    peaks = soc_peaks(soc) if soc is not None else None
    if trace is not None:
        check_output_path(trace)
    source = resolve_source(model)
    if backend == "acl":
        raise BackendUnavailableError(
            "board profiling runs through CANN's profiler: use profile_on_board()",
            reference=Ref.PROFILE_UNAVAILABLE)
    with tempfile.TemporaryDirectory(prefix="edgefuse-profile-") as folder:
        session = open_session(source, backend, strict=True, validate=False, profile=folder,
                               **options)
        with session:
            feeds = feed_set(session.inputs, inputs, seed=seed, batch=batch)[0]
            for _ in range(warmup + runs):
                session.run(feeds)
            ort_trace = read_ort_profile(session.end_profiling())
            used_backend = session.backend
        executed_path = Path(folder) / PROFILED_GRAPH
        executed = onnx.load(str(executed_path)) if executed_path.is_file() else None
        report = build_report(source, _model_of(source), ort_trace, executed, feeds,
                              backend=used_backend, warmup=warmup, peaks=peaks,
                              precision=precision, keep_fp16=keep_fp16)
    if trace is not None:
        write_trace(trace, [report])
    return report


def build_report(source: ModelSource, model: onnx.ModelProto, ort_trace: OrtTrace,
                 executed: onnx.ModelProto | None, feeds: Mapping[str, np.ndarray], *,
                 backend: str, warmup: int, peaks: SocPeaks | None,
                 precision: str = "fp16", keep_fp16: Collection[str] = ()) -> ProfileReport:
    """The table from a parsed ONNX Runtime profile of ``model``; the first ``warmup`` runs are
    dropped."""
    quantized = _quantized_nodes(model, keep_fp16) if precision == "int8" else None
    timed = ort_trace.runs[warmup:]
    if not timed:
        raise InputError("the profile holds no timed run", reference=Ref.BAD_PROFILE_FILE)
    infos = tensor_infos(model, _fixed_shapes(model, feeds))
    nodes = model_nodes(model, infos)
    order = [name for name, _, _ in timed[0].events]
    kernel_ops = {name: kernel.op for name, kernel in ort_trace.kernels.items()}
    found = segments(model, nodes, infos, executed, list(dict.fromkeys(order)), kernel_ops)
    by_key = {node.key: node for node in nodes}
    float_size = _float_itemsize(model)
    rows = [_row(segment, timed, by_key, kernel_ops, peaks, float_size, precision, quantized)
            for segment in found]
    covered = {key for segment in found for key in segment.origins}
    report = ProfileReport(
        model=source.label, backend=backend, runs=len(timed), warmup=warmup, rows=rows,
        wall_us=median([run.wall_us for run in timed]),
        folded_away=[node.key for node in nodes if node.key not in covered],
        removed=dict(provenance.removed(model)),
        phases=ort_trace.phases, run_events=[run.events for run in timed],
        run_spans=[(run.start_us, run.wall_us) for run in timed],
    )
    if peaks is not None:
        report.soc = peaks.soc
        report.soc_sources = list(peaks.sources)
        report.soc_notes = [*peaks.notes, f"the floor assumes the board runs at {precision}, "
                            "each row as one task (ATC fusing further could go below a row's "
                            "bytes term)"]
        if quantized is not None:
            kept = ", ".join(keep_fp16) or "none"
            report.soc_notes.append(
                f"int8: {len(quantized)} Conv/ConvTranspose/Gemm/MatMul layer(s) at the INT8 "
                f"peak, the rest at the FP16 peak (kept FP16: {kept})")
    uncounted = sorted({row.op_type for row in rows if row.flops is None})
    if uncounted:
        report.notes.append(f"FLOPs not counted for: {', '.join(uncounted)}")
    return report


def _row(segment: Segment, timed, by_key: Mapping[str, ModelNode], kernel_ops, peaks,
         float_size: int, precision: str, quantized: set[str] | None) -> ProfileRow:
    time_us = median([sum(run.kernel_us.get(k, 0.0) for k in segment.kernels) for run in timed])
    sources: list[str] = []
    rules: list[str] = []
    for key in segment.origins:
        node = by_key[key].node
        sources += provenance.origins(node)
        rules += provenance.rules(node)
    row = ProfileRow(
        name="+".join(segment.kernels),
        kernel_ops="+".join(kernel_ops.get(k, "?") for k in segment.kernels),
        op_type=segment.op_type, origins=segment.origins,
        sources=list(dict.fromkeys(sources)), rules=list(dict.fromkeys(rules)),
        time_us=time_us, flops=segment.flops, bytes=segment.bytes, unit=segment.unit)
    if peaks is not None and segment.origins:  # a runtime's own kernel is no work of the model
        floor = node_floor(peaks, flops=segment.flops, bytes_moved=segment.bytes,
                           unit=segment.unit, float_itemsize=float_size, precision=precision,
                           compute_precision=_compute_precision(segment, by_key, precision,
                                                                quantized))
        row.floor_us, row.memory_bound = floor.seconds * 1e6, floor.memory_bound
    return row


def _quantized_nodes(model: onnx.ModelProto, keep_fp16: Collection[str]) -> set[str]:
    """Names of the nodes ATC's INT8 calibration quantizes, less ``keep_fp16`` (each of which
    must be such a node: a misspelt name would silently change nothing)."""
    layers = quantizable_layers(model)
    unknown = [name for name in keep_fp16 if name not in layers]
    if unknown:
        raise InputError(
            f"--keep-fp16: not a Conv/ConvTranspose/Gemm/MatMul node of the model: "
            f"{', '.join(unknown)}",
            hint="name the ONNX nodes given to quantize --int8 --keep-fp16",
            reference=Ref.UNKNOWN_KEEP_FP16_LAYER)
    return set(layers) - set(keep_fp16)


def _compute_precision(segment: Segment, by_key: Mapping[str, ModelNode], precision: str,
                       quantized: set[str] | None) -> str:
    """INT8 for a row holding a quantized layer (its work may all run at the INT8 peak: the
    bound stays a bound), FP16 for every other row under ``int8``."""
    if quantized is None:
        return precision
    return "int8" if any(by_key[key].node.name in quantized for key in segment.origins) \
        else "fp16"


def _model_of(source: ModelSource) -> onnx.ModelProto:
    if source.onnx is None:
        raise BackendUnavailableError(
            f"{source.label} is an OM only; the host profile needs the ONNX next to it",
            hint="profile the BUILD_DIR `edgefuse compile` wrote, or the .onnx")
    return source.onnx if isinstance(source.onnx, onnx.ModelProto) else load_model(source.onnx)


def _fixed_shapes(model: onnx.ModelProto,
                  feeds: Mapping[str, np.ndarray]) -> dict[str, Sequence[int]]:
    """The fed shapes of the inputs they fit (an AIPP build is fed frames, not the tensor)."""
    fixed = {}
    for value in model.graph.input:
        array = feeds.get(value.name)
        if array is None:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) == array.ndim and all(
                not d.HasField("dim_value") or d.dim_value == size
                for d, size in zip(dims, array.shape, strict=True)):
            fixed[value.name] = array.shape
    return fixed


def _float_itemsize(model: onnx.ModelProto) -> int:
    """2 for a model whose inputs and weights are FP16 (and none FP32), else 4."""
    types = {init.data_type for init in model.graph.initializer}
    types |= {value.type.tensor_type.elem_type for value in model.graph.input}
    half = onnx.TensorProto.FLOAT16 in types and onnx.TensorProto.FLOAT not in types
    return 2 if half else 4
