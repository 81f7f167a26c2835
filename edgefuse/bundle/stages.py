"""One model of the spec through every stage, each stage's result taken from or put in the cache.

convert -> optimize (+ parity against the converted model) -> FP16 (quantize with the spec's
gate; its keep-FP32 set goes to compile) -> INT8, for ``precision: {mode: int8}`` only (the
calibration folder ATC quantizes with, from the spec's frames through the model's preprocessing,
as ``quantize --int8`` writes it, and the host emulation of the board's INT8 with its gate) ->
compile (the OM where ATC is, else the prepared ONNX and compile.sh; the model's application info
embedded; an INT8 build passes the calibration to ATC as ``compile --int8`` does) -> golden (a
recording on the host backend, checked on the board by ``edgefuse bundle verify``).

Each stage's cache key is the digest of its input files, its options and ``tool_versions()``
(``digests``); options that only judge a result (the optimize gate's threshold) stay out of the
key, so changing them re-judges the stored figures without rebuilding. A gate that fails raises
``BuildGateError`` (exit 1) naming the model, the gate and the outputs that missed it; a failed
stage stores nothing. Nothing here prints: progress goes to the ``progress`` callback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from edgefuse import model_info
from edgefuse._deps import require_torch
from edgefuse._files import save_onnx
from edgefuse.acl.atc.runner import cann_version, find_atc, toolkit_version_files
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model, count_custom_ops
from edgefuse.acl.compile.precision import KeepFp32
from edgefuse.acl.compile.prepare import host_runnable
from edgefuse.acl.ops.spec import DOMAIN as CUSTOM_DOMAIN
from edgefuse.apps.models import catalogue_info
from edgefuse.bundle.cache import Cache, CachedOnly, Entry
from edgefuse.bundle.digests import key_of, tool_versions, tree_sha256
from edgefuse.bundle.factory_sources import (
    covered_files,
    factory_source_digests,
    forget_local_modules,
    uncovered_local_modules,
)
from edgefuse.bundle.golden import GOLDEN_NPZ, record_golden
from edgefuse.bundle.reproducible import DEFAULT_EPOCH
from edgefuse.bundle.spec import Int8Spec, ModelSpec
from edgefuse.convert import convert
from edgefuse.errors import EdgefuseError, InputError, Ref
from edgefuse.fallback.sim_target import knows_board
from edgefuse.manifest import file_sha256, read_manifest, write_manifest
from edgefuse.model_info import AppInfo, Postprocess
from edgefuse.model_source import HOST_ONNX
from edgefuse.models.catalogue import CATALOGUE
from edgefuse.optimize import optimize
from edgefuse.optimize.append_yolo_head import append_yolo_head, yolo_head_options
from edgefuse.preprocess import Preprocess
from edgefuse.quantize import quantize
from edgefuse.quantize.int8 import REPORT as INT8_REPORT
from edgefuse.quantize.int8 import read_int8_calibration, write_int8_calibration
from edgefuse.quantize.int8_mixed import PREDICTION, MixedInt8Result
from edgefuse.verify import verify

STAGES = ("convert", "optimize", "fp16", "int8", "compile", "golden")
MODEL_FILE = "model.onnx"
INT8_FOLDER = "int8"  # the int8 stage's calibration folder (``quantize --int8``'s -o)
HOST_FILE = HOST_ONNX  # a custom-op build's model as host backends run it (decompositions)
BUILD_FOLDER = "build"
# keep_fp16 not written and no task to choose by: none kept, as quantize --int8 without --task
NO_TASK_CHOICE = ("none chosen automatically: the model declares no task (`task:` lets keep_fp16 "
                  "auto choose by its metric)")
FIGURE_DIGITS = 9  # significant digits of the parity figures a build writes (see ``figures``)
Progress = Callable[[str, str, str, float], None]  # (model, stage, "cached"|"built", seconds)


class BuildGateError(EdgefuseError):
    """A model missed one of its spec's verify gates (exit 1, like a failed `verify`)."""

    reference = Ref.BUILD_GATE_FAILED.value
    exit_code = 1


@dataclasses.dataclass(frozen=True)
class ModelBuild:
    """Where each stage's result of one model lies in the cache, and how each was obtained."""

    name: str
    entries: dict[str, Entry]
    cached: dict[str, bool]
    seconds: dict[str, float]
    app: dict[str, Any] | None


def build_model(model: ModelSpec, soc: str, cache: Cache | CachedOnly,
                progress: Progress) -> ModelBuild:
    """Every stage of ``model`` (see the module docstring); raises on a failed stage or gate."""
    entries: dict[str, Entry] = {}
    cached: dict[str, bool] = {}
    seconds: dict[str, float] = {}

    def run(stage: str, key_payload: dict[str, Any], produce: Callable[[Path], dict]) -> Entry:
        start = time.perf_counter()
        key = key_of({"stage": stage, **key_payload, "tools": tool_versions()})
        entry, hit = cache.fetch(stage, key, produce)
        seconds[stage] = time.perf_counter() - start
        cached[stage] = hit
        entries[stage] = entry
        progress(model.name, stage, "cached" if hit else "built", seconds[stage])
        return entry

    calibration = tree_sha256(model.calibration) if model.calibration else None
    sampling = {"samples": model.verify["samples"], "seed": model.verify["seed"],
                "calibration": calibration}
    converted = run("convert", {"source": _source_identity(model), "inputs": _inputs_json(model),
                                "opset": model.opset},
                    lambda scratch: _convert(model, scratch))
    optimized = run("optimize", {"model": converted.files[MODEL_FILE], **sampling,
                                 **{k: model.optimize[k]
                                    for k in ("target", "only", "skip", "yolo_head")}},
                    lambda scratch: _optimize(model, converted, scratch))
    _gate(model.name, "optimize", "optimized FP32 against the converted model",
          optimized.info["parity"], model.verify["optimize_min_cosine"],
          model.verify["max_rel_l2"])
    fp16 = run("fp16", {"model": optimized.files[MODEL_FILE], **sampling,
                        "min_cosine": model.verify["fp16_min_cosine"],
                        **{k: model.precision[k] for k in ("keep_fp32", "keep_io_types")}},
               lambda scratch: _fp16(model, optimized, scratch))
    app = resolve_app_info(model, converted.path(MODEL_FILE))
    int8 = None
    if model.int8 is not None:
        task = (app or {}).get("task")  # AppInfo holds only the tasks verify --task scores
        keep = model.int8.keep_fp16_for(task)
        search = {"task": task, "max_drop": model.int8.max_drop,
                  "budget_s": model.int8.budget_s} if "auto" in keep else None
        int8 = run("int8", {"model": optimized.files[MODEL_FILE], "soc": soc,
                            "calibration": tree_sha256(model.int8.calibration),
                            "keep_fp16": list(keep), "search": search,
                            "preprocess": (app or {}).get("preprocess")},
                   lambda scratch: _int8(model.int8, soc, optimized, app, scratch))
        _task_gate(model.name, int8.info["automatic"])  # first: the cause of a low cosine
        _gate(model.name, "int8", "the host emulation of the board's INT8 against FP32",
              int8.info["parity"], model.int8.min_cosine, None)
    compiled = run("compile", {"model": optimized.files[MODEL_FILE], "soc": soc,
                               "keep_fp32": fp16.info["keep_fp32"], "app": app,
                               "precision": model.precision["mode"], "aipp": model.aipp,
                               "int8": int8.files if int8 is not None else None,
                               "custom_ops": model.custom_ops, "atc": atc_identity()},
                   lambda scratch: _compile(model, soc, optimized, fp16, int8, app, scratch))
    host = optimized.files[MODEL_FILE] if compiled.info["custom_ops"] else None
    backend = golden_backend(soc)
    frames = {"frames": tree_sha256(model.int8.calibration)} if model.int8 is not None else {}
    run("golden", {"build": compiled.files[f"{BUILD_FOLDER}/manifest.json"], "host": host,
                   "backend": backend, "seed": model.verify["seed"], **frames},
        lambda scratch: _golden(model, compiled, optimized if host else None, backend, scratch))
    return ModelBuild(model.name, entries, cached, seconds, app)


def int8_summary(build: ModelBuild) -> str | None:
    """One line on the layers an INT8 model keeps FP16 and what its metric is predicted to be
    (None for a model that is not INT8)."""
    int8 = build.entries.get("int8")
    if int8 is None:
        return None
    kept = ", ".join(int8.info["keep_fp16"]) or "none"
    automatic = int8.info["automatic"]
    if automatic is None:
        return f"{build.name}: INT8, kept FP16 ({int8.info['keep_fp16_chosen']}): {kept}"
    cut = f"; search stopped by its {automatic['stopped_by']} bound" \
        if automatic["stopped_by"] else ""
    return (f"{build.name}: INT8, kept FP16 (chosen by {automatic['metric']}): {kept}; "
            f"{automatic['metric']} FP16 {automatic['fp16']:.4f}, all INT8 "
            f"{automatic['int8_all_layers']:.4f}, mixed {automatic['int8_mixed']:.4f}{cut} "
            "(host prediction until a board confirms it)")


def model_stages(model: ModelSpec) -> tuple[str, ...]:
    """The stages ``build_model`` runs for ``model``: int8 only for ``precision: {mode: int8}``."""
    return tuple(stage for stage in STAGES if stage != "int8" or model.int8 is not None)


# ---- keys ---------------------------------------------------------------------------------------


def _source_identity(model: ModelSpec) -> dict[str, Any]:
    if model.source_kind == "catalogue":
        name, variant = model.catalogue_name
        return {"catalogue": name, "variant": variant}
    if model.source_kind == "factory":
        return {"factory": model.source,
                "sources": factory_source_digests(model.source, model.directory)}
    digest = tree_sha256(model.source_file)
    if model.sha256 is not None and digest != model.sha256:
        raise InputError(
            f"model '{model.name}': '{model.source}' does not match the sha256 the spec pins",
            context=f"spec:  {model.sha256}\nfound: {digest}",
            hint="update `sha256:` if the new file is intended, else restore the pinned file",
            reference=Ref.BAD_BUILD_SPEC,
        )
    return {"file": digest}


def _inputs_json(model: ModelSpec) -> list | None:
    if model.inputs is None:
        return None
    return [[name, list(shape)] for name, shape in model.inputs.items()]


def atc_identity() -> str | None:
    """The CANN that compiles here, None without ATC: its version, a digest of the ``atc`` on
    PATH (another toolkit's atc may be first on PATH) and a digest of the toolkit's version
    files (``toolkit_version_files``): ``atc`` is a launcher script that runs the toolkit's
    compiler binary, so an upgrade in place changes those files, not the launcher (issue 27 §2).
    Part of the compile key."""
    atc = find_atc()
    if atc is None:
        return None
    launcher = Path(atc).resolve()
    versions = hashlib.sha256()
    for path in toolkit_version_files(launcher):
        name = f"{path.parent.name}/{path.name}"
        versions.update(name.encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return (f"{cann_version() or 'unknown'} atc:{file_sha256(launcher)[:16]} "
            f"versions:{versions.hexdigest()[:16]}")


# ---- producers ----------------------------------------------------------------------------------


def _convert(model: ModelSpec, scratch: Path) -> dict[str, Any]:
    """Convert on one PyTorch thread: a catalogue model calibrates its BatchNorm statistics by
    running the network, and float sums in another thread count give other weights."""
    needs_torch = model.source_kind != "file" or zipfile.is_zipfile(model.source_file)
    if not needs_torch:
        return _convert_on(model, scratch)
    torch = require_torch(f"converting '{model.source}'")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _convert_on(model, scratch)
    finally:
        torch.set_num_threads(previous)


def _convert_on(model: ModelSpec, scratch: Path) -> dict[str, Any]:
    shapes: Any = model.inputs
    if shapes is not None and None in shapes:
        shapes = shapes[None]
    if model.source_kind == "catalogue":
        name, variant = model.catalogue_name
        entry = CATALOGUE[name]
        if shapes is None:
            shapes = entry.shapes(variant)[0]
        source: Any = entry.build(variant)
    elif model.source_kind == "factory":
        if str(model.directory) not in sys.path:  # the spec's own modules, as `python -m` does
            sys.path.insert(0, str(model.directory))
        forget_local_modules(model.directory)  # the files as they are now, not as first imported
        source = model.source
    else:
        source = str(model.source_file)
    proto = convert(source, inputs=shapes, opset=model.opset)
    if model.source_kind == "factory":
        _check_factory_sources(model)
    _set_metadata(proto, "edgefuse.source", model.source)  # as written: no absolute path
    onnx.save_model(proto, str(scratch / MODEL_FILE))
    return {"inputs": [i.name for i in proto.graph.input]}


def _check_factory_sources(model: ModelSpec) -> None:
    """Refuse to store a model whose factory loaded a module of the spec's folder that its key
    does not cover (imported by a name built at run time): the entry would outlive its edits."""
    covered = covered_files(model.source, model.directory)
    missed = uncovered_local_modules(covered, model.directory)
    if missed:
        names = ", ".join(missed)
        raise InputError(
            f"model '{model.name}': the factory '{model.source}' loaded {names}, which its "
            "import statements do not name",
            context="the build cache keys a factory model on the files its imports name; "
                    "a module imported by a computed name would be missed when it changes",
            hint="import the module by name (`import helper` / `from helper import x`), or put "
                 "the factory in a package (a package counts whole)",
            reference=Ref.BAD_FACTORY,
        )


def _set_metadata(proto: onnx.ModelProto, key: str, value: str) -> None:
    for prop in proto.metadata_props:
        if prop.key == key:
            prop.value = value
            return
    proto.metadata_props.add(key=key, value=value)


def _optimize(model: ModelSpec, converted: Entry, scratch: Path) -> dict[str, Any]:
    result = optimize(converted.path(MODEL_FILE), output=scratch / MODEL_FILE,
                      target=model.optimize["target"], only=model.optimize["only"],
                      skip=model.optimize["skip"])
    (scratch / "optimize.json").write_text(_stable_report(result.report.to_json()),
                                           encoding="utf-8")
    parity = verify(converted.path(MODEL_FILE), scratch / MODEL_FILE,
                    inputs=model.calibration, seed=model.verify["seed"],
                    samples=model.verify["samples"], min_cosine=-1.0)
    if model.optimize["yolo_head"] is not None:  # after the gate: it changes the outputs
        head = yolo_head_options(model.optimize["yolo_head"],
                                 f"models '{model.name}' optimize.yolo_head")
        save_onnx(append_yolo_head(onnx.load(str(scratch / MODEL_FILE)), head),
                  scratch / MODEL_FILE)
    return {"parity": figures({"outputs": [o.to_json() for o in parity.outputs],
                               "degenerate": parity.degenerate})}


def _fp16(model: ModelSpec, optimized: Entry, scratch: Path) -> dict[str, Any]:
    minimum = model.verify["fp16_min_cosine"]
    result = quantize(optimized.path(MODEL_FILE), keep_fp32=model.precision["keep_fp32"],
                      keep_io_types=model.precision["keep_io_types"], min_cosine=minimum,
                      inputs=model.calibration, seed=model.verify["seed"],
                      samples=model.verify["samples"])
    report = result.report
    parity = figures({"outputs": [g.to_json() for g in report.gate],
                      "degenerate": report.degenerate})
    _gate(model.name, "fp16", "FP16 (storage emulated) against FP32", parity, minimum, None)
    (scratch / "fp16.json").write_text(_stable_report(report.to_json()), encoding="utf-8")
    return {"parity": parity, "keep_fp32": report.keep_fp32,
            "conversion": report.conversion}


def _int8(spec: Int8Spec, soc: str, optimized: Entry, app: dict[str, Any] | None,
          scratch: Path) -> dict[str, Any]:
    """``quantize --int8 --emulate`` on the optimized model: the calibration folder from the
    spec's frames through the app's preprocessing, then the emulation against FP32 on the same
    frames. A model ending in the YoloHead (optimize.yolo_head) is calibrated and judged on its
    raw predictions, as the optimize gate judges it: final detections compare by nothing a
    cosine measures (and are all zero where nothing is detected); other edgefuse custom ops run
    as their decompositions. What only the frames or the model can show (noise, frames that do
    not fit the input, a layer the model lacks) is a problem at the spec's line."""
    proto = _raw_predictions(onnx.load(str(optimized.path(MODEL_FILE))))
    if count_custom_ops(proto):
        proto = host_runnable(proto)
    preprocess = AppInfo.from_dict(app).preprocess if app is not None else None
    task = (app or {}).get("task")
    keep = spec.keep_fp16_for(task)
    if "auto" in keep and task is None:
        raise spec.problem(
            "keep_fp16", "keep_fp16: auto chooses the layers by the task metric (AP50, mIoU, "
            "top-1), and the model declares no task: neither the spec (`task:`) nor the model's "
            "app info names one",
            "add `task: detect`, `segment` or `classify` to the model, or name the layers "
            "(`keep_fp16: [LAYER, ...]`), or write `keep_fp16: none`")
    try:
        written = write_int8_calibration(
            proto, scratch / INT8_FOLDER, inputs=spec.calibration, keep_fp16=list(keep),
            infer_soc=soc, preprocess=preprocess, emulate=True, task=task,
            max_drop=spec.max_drop, budget_s=spec.budget_s)
    except InputError as exc:
        message = _as_written(exc.message, spec)
        if exc.reference == Ref.UNKNOWN_KEEP_FP16_LAYER.value:
            raise spec.problem("keep_fp16", message.removeprefix("--keep-fp16: "),
                               f"{exc.hint}; the build quantizes the optimized model: "
                               "`edgefuse optimize MODEL -o opt.onnx` writes it") from None
        raise spec.problem("calibration", message, exc.hint) from None
    if written.mixed is not None:  # its timings out: equal builds give equal bundle bytes
        (scratch / INT8_FOLDER / INT8_REPORT).write_text(
            _stable_report(written.mixed.to_json()), encoding="utf-8")
    parity = verify(proto, scratch / INT8_FOLDER / written.emulated, inputs=spec.calibration,
                    preprocess=preprocess, min_cosine=-1.0)
    return {"parity": figures({"outputs": [o.to_json() for o in parity.outputs],
                               "degenerate": parity.degenerate}),
            "samples": written.samples, "keep_fp16": list(written.keep_fp16),
            "keep_fp16_chosen": "automatically" if written.mixed is not None else
            "by the spec" if spec.keep_fp16 is not None else NO_TASK_CHOICE,
            "automatic": None if written.mixed is None else _automatic(written.mixed)}


def _automatic(mixed: MixedInt8Result) -> dict[str, Any]:
    """What the MANIFEST and the gate need of the automatic choice (the full report is
    ``int8/int8_report.json``)."""
    return figures({
        "task": mixed.task, "metric": mixed.metric, "samples": mixed.samples,
        "fp16": mixed.fp16, "int8_all_layers": mixed.all_int8, "int8_mixed": mixed.mixed,
        "max_drop_points": mixed.max_drop, "threshold": mixed.threshold,
        "passed": mixed.passed, "stopped_by": mixed.stopped_by,
        "kept": [{"layer": k.node, "reason": k.reason,
                  "buys_points": round(100 * k.buys, 3)} for k in mixed.kept],
        "report": f"{INT8_FOLDER}/{INT8_REPORT}", "note": PREDICTION})


def _as_written(message: str, spec: Int8Spec) -> str:
    """``message`` with the calibration source's resolved path as the spec writes it: a file
    inside a folder written ``frames/`` reads ``frames/b.jpg``, not ``frames//b.jpg``."""
    folder = spec.calibration_text.rstrip("/") + "/"
    return (message.replace(f"{spec.calibration}{os.sep}", folder)
            .replace(str(spec.calibration), spec.calibration_text))


def _raw_predictions(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the edgefuse ops that end it (each writing only graph outputs), their
    inputs returned instead: the YoloHead's raw YOLO output (after its Transpose for YOLOv5)."""
    outputs = {output.name for output in model.graph.output}
    heads = [node for node in model.graph.node
             if node.domain == CUSTOM_DOMAIN and set(node.output) <= outputs]
    if not heads:
        return model
    typed = {value.name: value
             for value in onnx.shape_inference.infer_shapes(model).graph.value_info}
    removed = {name for head in heads for name in head.output}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [node for node in result.graph.node if node.name not in {h.name for h in heads}]
    del result.graph.node[:]
    result.graph.node.extend(kept)
    remaining = [output for output in result.graph.output if output.name not in removed]
    del result.graph.output[:]
    result.graph.output.extend(remaining + [typed[name] for head in heads
                                            for name in head.input if name])
    return result


def _compile(model: ModelSpec, soc: str, optimized: Entry, fp16: Entry, int8: Entry | None,
             app: dict[str, Any] | None, scratch: Path) -> dict[str, Any]:
    proto = onnx.load(str(optimized.path(MODEL_FILE)))
    if app is not None:
        proto = model_info.embed(proto, AppInfo.from_dict(app))
    keep = fp16.info["keep_fp32"]
    result = compile_model(
        proto, soc, scratch / BUILD_FOLDER, precision=model.atc_precision_mode,
        aipp=AippSpec.from_dict(model.aipp) if model.aipp else None,
        keep_fp32=KeepFp32(tuple(keep["nodes"]), tuple(keep["op_types"])),
        int8=read_int8_calibration(int8.path(INT8_FOLDER)) if int8 is not None else None,
        custom_ops=model.custom_ops,
    )
    manifest = read_manifest(scratch / BUILD_FOLDER)
    extra = figures(manifest.extra)
    if app is not None:
        extra[model_info.MANIFEST_KEY] = app
    write_manifest(scratch / BUILD_FOLDER, dataclasses.replace(manifest, extra=extra))
    return {"om": result.om_path.name if result.om_path else None, "argv": result.argv,
            "custom_ops": result.custom_ops, "decomposed": result.decomposed,
            "parity": figures(result.prepared.parity)}


def golden_backend(soc: str) -> str:
    """``sim`` (the board's I/O, FP16 numerics and memory, simulated) for a soc whose board
    edgefuse knows, else ONNX Runtime on the CPU."""
    return "sim" if knows_board(soc) else "cpu"


def _golden(model: ModelSpec, compiled: Entry, host: Entry | None, backend: str,
            scratch: Path) -> dict[str, Any]:
    """The recording; a build with custom ops also keeps the model hosts run (``HOST_FILE``).
    An INT8 build's golden is recorded on a real frame of its calibration (``record_golden``)."""
    host_onnx = None
    if host is not None:
        host_onnx = scratch / HOST_FILE
        shutil.copyfile(host.path(MODEL_FILE), host_onnx)
    int8 = model.int8
    record = record_golden(compiled.path(BUILD_FOLDER), scratch / GOLDEN_NPZ, backend,
                           seed=model.verify["seed"], epoch=DEFAULT_EPOCH, host_onnx=host_onnx,
                           frames=int8.calibration if int8 is not None else None,
                           frames_text=int8.calibration_text if int8 is not None else None)
    return {"backend": record["backend"], "host_onnx": HOST_FILE if host is not None else None,
            "inputs": record.get("golden_inputs", f"seeded random (seed {model.verify['seed']})")}


def _stable_report(report: dict[str, Any]) -> str:
    """A stage report without its timings, so that equal inputs give equal bytes."""
    return json.dumps(figures(_without_timings(report)), indent=2, sort_keys=True) + "\n"


def figures(value: Any) -> Any:
    """``value`` with every float rounded to ``FIGURE_DIGITS`` significant digits.

    Why: a cosine summed by a multi-threaded BLAS differs in its last bits with the thread count,
    which would make equal builds on different machines (or with other ``--jobs``) write
    different bytes; nine digits keep every figure a gate reads."""
    if isinstance(value, float):
        return float(f"{value:.{FIGURE_DIGITS}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: figures(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [figures(v) for v in value]
    return value


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if k not in ("seconds", "elapsed_s", "time_s")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


# ---- gates and app info -------------------------------------------------------------------------


def _task_gate(name: str, automatic: dict[str, Any] | None) -> None:
    """keep_fp16 auto's gate: the task metric under the host's INT8 emulation, with the chosen
    layers FP16, within ``int8_max_drop`` points of FP16's (``quantize --int8`` exits 1)."""
    if automatic is None or automatic["passed"]:
        return
    raise BuildGateError(
        f"model '{name}' failed the int8 task gate ({automatic['metric']} under the host "
        f"emulation of the board's INT8 >= FP16's less {automatic['max_drop_points']:g} "
        "point(s))",
        context=f"FP16 {automatic['fp16']:.4f}, all layers INT8 "
                f"{automatic['int8_all_layers']:.4f}, with {len(automatic['kept'])} layer(s) "
                f"kept FP16 {automatic['int8_mixed']:.4f} < {automatic['threshold']:.4f}"
                + (f"; the search stopped at its {automatic['stopped_by']} bound"
                   if automatic["stopped_by"] else ""),
        hint="give the search more time (`precision: {keep_fp16_budget_s: 600}`), keep "
             "layers FP16 by name (`keep_fp16: [auto, LAYER]`), or allow a larger drop "
             "(`verify: {int8_max_drop: 2}`) if the application can afford it")


def _gate(name: str, stage: str, what: str, parity: dict[str, Any], min_cosine: float,
          max_rel_l2: float | None) -> None:
    degenerate = parity.get("degenerate", {})
    judged = [o for o in parity["outputs"] if o["name"] not in degenerate]
    if not judged:
        raise BuildGateError(
            f"model '{name}': the {stage} gate ({what}) is inconclusive: every output is nearly "
            "constant on the inputs",
            context="\n".join(f"{k}: {v}" for k, v in degenerate.items()),
            hint="give real inputs: `verify: {calibration: FOLDER}` with images or .npz files")
    missed = [o for o in judged if o["cosine"] is None or o["cosine"] < min_cosine or (
        max_rel_l2 is not None and (o["rel_l2_error"] is None or o["rel_l2_error"] > max_rel_l2))]
    if missed:
        gate = f"cosine >= {min_cosine}" + (
            f" and rel L2 <= {max_rel_l2}" if max_rel_l2 is not None else "")
        raise BuildGateError(
            f"model '{name}' failed the {stage} gate ({what}: {gate})",
            context="\n".join(f"output '{o['name']}': cosine {o['cosine']}, rel L2 "
                              f"{o['rel_l2_error']}" for o in missed),
            hint=_GATE_HINTS[stage])


_GATE_HINTS = {
    "optimize": "an optimize rule changed the outputs: skip it (`optimize: {skip: [RULE]}`) and "
                "report the model",
    "fp16": "fp16: keep more nodes FP32 (`precision: {keep_fp32: auto}`) or calibrate on real "
            "data (`verify: {calibration: ...}`); lower the gate in `verify:` only if the task "
            "metric allows it",
    "int8": "keep the layers INT8 hurts most FP16 (`precision: {keep_fp16: [LAYER, ...]}`; "
            "`edgefuse quantize MODEL --int8 --emulate` and `verify --per-layer` name them), or "
            "calibrate on more frames of the scene; lower verify.int8_min_cosine only if the "
            "task metric allows it",
}


def resolve_app_info(model: ModelSpec, converted: Path) -> dict[str, Any] | None:
    """The application info the bundle carries: the spec's keys over the model's own record
    (its ONNX metadata), over what the catalogue knows of a catalogue model."""
    base = model_info.from_onnx(onnx.load(str(converted), load_external_data=False),
                                model.name)
    if base is None and model.source_kind == "catalogue":
        name, variant = model.catalogue_name
        base = catalogue_info(CATALOGUE[name], variant)
    if base is None and not model.app:
        return None
    base = base or AppInfo()
    given = model.app
    preprocess = base.preprocess
    if "preprocess" in given:
        preprocess = Preprocess.from_dict(given["preprocess"], base=preprocess,
                                          where=f"model '{model.name}' preprocess")
    post = {**{k: v for k, v in dataclasses.asdict(base.postprocess).items() if v is not None},
            **given.get("postprocess", {})}
    if model.optimize["yolo_head"] is not None:  # the device decodes: the app reads its rows
        post["layout"] = "yolo_head"
    info = AppInfo(task=given.get("task", base.task),
                   classes=tuple(given.get("classes", base.classes)),
                   preprocess=preprocess, postprocess=Postprocess.from_dict(post))
    return info.to_dict()
