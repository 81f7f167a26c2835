"""compile: an ONNX model -> BUILD_DIR with everything ATC needs, and the OM when ATC is here.

Why a BUILD_DIR and not just an OM: most hosts that run edgefuse have no CANN toolkit, and a
board has too little memory to run ATC comfortably. So compile always writes the prepared ONNX,
``aipp.cfg`` / ``keep_dtype.cfg`` / ``modify_mixlist.json``, the exact ATC command as a runnable
``compile.sh`` (what a CANN user would type), the op-support report and ``manifest.json``; and
when ``atc`` is on PATH it also runs it and adds ``model.om`` and ``atc.log``.

Order, so that nothing slow or irreversible happens before a cheap check has passed:
soc -> atc present (if required) -> load -> custom ops (below) -> gears -> prepare (opset,
parity) -> op-support check (refuse, listing every offending node) -> AIPP and precision files ->
write a temporary sibling directory -> ATC -> manifest -> rename into place. On any error the
temporary directory is removed; only a failed ATC run leaves its log, next to BUILD_DIR as
``BUILD_DIR.atc.log``.

Custom ops. A model the Ascend optimizer rewrote carries edgefuse custom ops (Swish, YoloHead,
DepthwiseConv), which ATC parses only through an installed edgefuse op package (E19010, "No
parser is registered for Op [..., optype [ai.onnx::11::Swish]]", without one; older CANN said
E16002). Such a build records the dependency in ``manifest.json`` (``custom_ops``: the ops, the soc,
the CANN range, how to build and install the package, how to do without), refuses ops whose
kernel the soc cannot run, checks that a package with the ops is installed before ATC runs -- here
and in ``compile.sh`` (``edgefuse.acl.ops.installed``) -- and says so in the printed instructions.
``custom_ops=False`` (``--no-custom-ops``) instead replaces every custom node by its decomposition
into standard ONNX ops before anything else, so the OM needs no package; the parity gate of
prepare compares the result with the original.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx.helper
import onnx.shape_inference

from edgefuse._checks import integer_at_least, positive_number
from edgefuse._files import publish_directory, save_onnx, temporary_directory_in
from edgefuse._graph_walk import all_nodes
from edgefuse._version import __version__
from edgefuse.acl.atc.options import OUTPUT_TYPES, AtcOptions
from edgefuse.acl.atc.runner import AtcError, cann_version, find_atc, run_atc
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.int8 import COMPRESSION_FILE as INT8_CONFIG
from edgefuse.acl.compile.int8 import plan_int8, stage_int8
from edgefuse.acl.compile.opsupport import OpSupportReport, check_model, load_table
from edgefuse.acl.compile.precision import (
    KEEP_DTYPE_FILE,
    MIXLIST_FILE,
    NOTHING_KEPT,
    KeepFp32,
    origin_dtype_warning,
    plan_keep_fp32,
)
from edgefuse.acl.compile.prepare import (
    DEFAULT_TARGET_OPSET,
    Gears,
    PreparedModel,
    host_runnable,
    make_gears,
    prepare_for_atc,
)
from edgefuse.acl.compile.soc import detect_soc, validate_soc
from edgefuse.acl.compile.unified_buffer import UnifiedBuffer, unified_buffer
from edgefuse.acl.ops import installed
from edgefuse.acl.ops.build import VENDOR
from edgefuse.acl.ops.registry import ALL_OPS, OPS_BY_NAME
from edgefuse.acl.ops.spec import DOMAIN as CUSTOM_DOMAIN
from edgefuse.acl.ops.spec import OpSpec
from edgefuse.acl.ops.toolkit import CANN_BELOW, CANN_MIN, CANN_RANGE
from edgefuse.acl.ops.yolo_head.spec import nms_limit_warning, overflow_warning
from edgefuse.convert.onnx_load import graph_input_names, load_model
from edgefuse.errors import InputError, Ref, ToolError
from edgefuse.manifest import AippRecord, BuildManifest, TensorEntry, write_manifest
from edgefuse.quantize.int8 import Int8Calibration

# The oldest opset compile prepares a model at: ONNX Runtime (the parity gate) runs 7 and up.
MIN_TARGET_OPSET = 7
DEFAULT_ATC_TIMEOUT_S = 3 * 3600.0  # ResNet-class models take minutes; big ones on a board, hours
MODEL_FILE = "model.onnx"
OM_PREFIX = "model"
AIPP_FILE = "aipp.cfg"
SCRIPT_FILE = "compile.sh"
LOG_FILE = "atc.log"
REPORT_FILE = "op_support.json"
SET_ENV_EXAMPLE = "/usr/local/Ascend/ascend-toolkit/set_env.sh"

logger = logging.getLogger(__name__)


class UnsupportedOpsError(InputError):
    """The op-support check found nodes ATC's parser will refuse."""

    reference = Ref.UNSUPPORTED_OPS.value


@dataclasses.dataclass
class BuildResult:
    output_dir: Path
    om_path: Path | None  # None when ATC was not run here
    argv: list[str]
    manifest: BuildManifest
    op_support: OpSupportReport
    prepared: PreparedModel
    custom_ops: dict[str, int] = dataclasses.field(default_factory=dict)  # op -> nodes, ATC side
    decomposed: dict[str, int] = dataclasses.field(default_factory=dict)  # --no-custom-ops


def compile_model(
    model: str | os.PathLike[str] | onnx.ModelProto,
    soc: str | None,
    output_dir: str | os.PathLike[str],
    *,
    precision: str = "force_fp16",
    output_type: str | None = None,
    aipp: AippSpec | None = None,
    dynamic_batch: Sequence[int] | None = None,
    dynamic_image_size: Sequence[tuple[int, int]] | None = None,
    keep_fp32: KeepFp32 = NOTHING_KEPT,
    int8: Int8Calibration | None = None,
    require_atc: bool = False,
    atc_timeout: float = DEFAULT_ATC_TIMEOUT_S,
    opset: int = DEFAULT_TARGET_OPSET,
    plugins: Collection[str] | None = None,
    custom_ops: bool = True,
    overwrite: bool = False,
    echo: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> BuildResult:
    """Write BUILD_DIR for ``soc`` (None: detect it with ``npu-smi info``) and run ATC if here.

    ``model`` is an ONNX path or ModelProto (never modified), ideally the FP32 output of
    optimize; ``keep_fp32`` the nodes and op types to keep FP32 on the board, e.g. the
    ``QuantizeReport.keep`` of the FP16 stage; ``int8`` a calibration folder of
    ``quantize --int8`` (``read_int8_calibration``): ATC quantizes to INT8 with it
    (``--compression_optimize_conf``, see ``edgefuse.acl.compile.int8``). ``require_atc``
    turns a missing ``atc`` into an error before anything is written;
    ``plugins`` are the ``OriginOpType`` strings of registered custom-op parser plugins; None
    means edgefuse's own custom ops (``edgefuse ops build`` makes their package), so a model the
    Ascend optimizer rewrote compiles as it is;
    ``custom_ops=False`` decomposes edgefuse's custom ops into standard ONNX ops, so the OM
    needs no op package (see the module docstring); ``env`` is where an op package is looked
    for before ATC runs (default: this process's environment);
    ``echo`` receives ATC's output line by line while it runs.
    """
    integer_at_least("opset", opset, MIN_TARGET_OPSET)
    if opset > load_table().max_opset:
        raise InputError(
            f"opset must be at most {load_table().max_opset} (the newest ATC's ONNX parser "
            f"handles), got {opset}",
            reference=Ref.BAD_ARGUMENT,
        )
    positive_number("atc_timeout", atc_timeout)
    soc_name = _resolve_soc(soc)
    atc = find_atc()
    if require_atc and atc is None:
        raise ToolError(
            "`atc` is not on PATH and --require-atc was given",
            hint=f"source the CANN toolkit's set_env.sh first (e.g. {SET_ENV_EXAMPLE})",
            reference=Ref.ATC_NOT_FOUND,
        )
    out = Path(output_dir)
    _check_output_dir(out, overwrite)
    loaded = load_model(model)
    used = count_custom_ops(loaded)
    decomposed: dict[str, int] = {}
    nms_warnings = _decomposed_nms_warnings(loaded) if not custom_ops and "YoloHead" in used else []
    if not custom_ops and used:
        loaded, decomposed, used = host_runnable(loaded), used, {}
    if plugins is None:
        plugins = edgefuse_plugins() if custom_ops else ()
    specs = [OPS_BY_NAME[name] for name in used]
    _check_custom_ops_run_on(specs, soc_name)
    buffer = unified_buffer(soc_name) if "YoloHead" in used else None
    kernel_warnings = nms_warnings + (_yolo_head_warnings(loaded, soc_name, buffer)
                                      if buffer else [])
    for warning in kernel_warnings:
        logger.warning("%s", warning)
    if atc is not None:
        installed.require_installed(specs, soc_name, env)
    gears = make_gears(loaded, dynamic_batch=dynamic_batch, dynamic_image_size=dynamic_image_size)
    prepared = prepare_for_atc(loaded, target_opset=opset, gears=gears, plugins=plugins)
    input_names = graph_input_names(prepared.model)
    report = check_model(prepared.model, target=soc_name, plugins=plugins, gear_dims=gears.dims)
    if not report.ok:
        raise _unsupported(report, soc_name)
    aipp_record = (_aipp_record(prepared.model, input_names, aipp, dynamic_image_size)
                   if aipp is not None else None)
    size_from_gears = aipp is not None and dynamic_image_size is not None
    plan = plan_keep_fp32(prepared.model, keep_fp32).for_mode(precision)
    family = validate_soc(soc_name).short_name
    dtype_warning = origin_dtype_warning(prepared.model, precision, family)
    if dtype_warning is not None:
        logger.warning("%s", dtype_warning)
        plan.decisions["notes"].append(dtype_warning)
    atc_shape = _atc_input_shape(prepared.model, input_names)
    int8_plan = None if int8 is None else plan_int8(
        int8, prepared.model, atc_shape, soc_name,
        aipp_record.input if aipp_record is not None else None)
    options = AtcOptions(
        model=MODEL_FILE,
        output=OM_PREFIX,
        soc_version=soc_name,
        input_shape=atc_shape,
        precision_mode=precision,
        insert_op_conf=AIPP_FILE if aipp is not None else None,
        keep_dtype=KEEP_DTYPE_FILE if plan.keep_dtype_text else None,
        modify_mixlist=MIXLIST_FILE if plan.mixlist else None,
        dynamic_batch_size=list(dynamic_batch) if dynamic_batch is not None else None,
        dynamic_image_size=list(dynamic_image_size) if dynamic_image_size is not None else None,
        output_type=output_type,
        aipp_size_from_gears=size_from_gears,
        compression_optimize_conf=INT8_CONFIG if int8_plan is not None else None,
        enable_small_channel=int8_plan is not None and int8_plan.first_layer,
    )
    argv = options.to_argv()
    outputs = _output_entries(prepared.model, output_type)

    staging = temporary_directory_in(out.parent, f".{out.name}.")
    try:
        publish_directory(staging)
        save_onnx(prepared.model, staging / MODEL_FILE)
        files = [MODEL_FILE, SCRIPT_FILE, REPORT_FILE]
        _write(staging / SCRIPT_FILE, _script(options, soc_name, specs), executable=True)
        _write(staging / REPORT_FILE, json.dumps(report.to_json(), indent=2) + "\n")
        if aipp_record is not None:
            _write(staging / AIPP_FILE,
                   aipp_record.spec.to_cfg(related_input_rank=aipp_record.related_input_rank,
                                           size_from_gears=size_from_gears))
            files.append(AIPP_FILE)
        if plan.keep_dtype_text:
            _write(staging / KEEP_DTYPE_FILE, plan.keep_dtype_text)
            files.append(KEEP_DTYPE_FILE)
        if plan.mixlist:
            _write(staging / MIXLIST_FILE, json.dumps(plan.mixlist, indent=2) + "\n")
            files.append(MIXLIST_FILE)
        if int8_plan is not None:
            files += stage_int8(int8_plan, staging)
        atc_info: dict[str, Any] = {"argv": argv, "script": SCRIPT_FILE, "ran": False}
        om_name = None
        if atc is not None:
            argv_here = [atc, *argv[1:]]
            try:
                result = run_atc(
                    argv_here,
                    cwd=staging,
                    om_path=staging / f"{OM_PREFIX}.om",
                    log_path=staging / LOG_FILE,
                    timeout=atc_timeout,
                    echo=echo,
                )
            except AtcError as exc:
                kept_log = out.parent / f"{out.name}.atc.log"
                os.replace(staging / LOG_FILE, kept_log)
                raise exc.relocated(kept_log) from None
            om_name = result.om_path.name
            files += [om_name, LOG_FILE]
            atc_info.update(
                ran=True,
                log=LOG_FILE,
                seconds=round(result.seconds, 3),
                success_marker_seen=result.success_marker_seen,
            )
        manifest = BuildManifest(
            model=MODEL_FILE,
            inputs=_input_entries(prepared.model, input_names, aipp_record),
            outputs=outputs,
            edgefuse_version=__version__,
            soc=soc_name,
            cann_version=cann_version() if atc is not None else None,
            om=om_name,
            preprocess=aipp_record,
            files=dict.fromkeys(files, ""),
            extra={
                "atc": atc_info,
                "gears": _gears_json(gears, dynamic_batch, dynamic_image_size),
                "precision": plan.decisions,
                "int8": int8_plan.to_json() if int8_plan is not None else None,
                "output_type": output_type,
                "prepare": prepared.to_json(),
                "custom_ops": _custom_ops_json(used, decomposed, soc_name, kernel_warnings,
                                              buffer),
                "op_support": {
                    "report": REPORT_FILE,
                    "errors": len(report.errors),
                    "warnings": sum(
                        f.severity == "warning" for node in report.nodes for f in node.findings
                    ),
                },
            },
        )
        written = write_manifest(staging, manifest)
        _move_into_place(staging, out, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    om_path = out / om_name if om_name else None
    return BuildResult(out, om_path, argv, written, report, prepared, used, decomposed)


def run_instructions(result: BuildResult) -> str:
    """What to do with a BUILD_DIR written without ATC."""
    lines = [
        f"atc is not on PATH here: wrote {result.output_dir} without {OM_PREFIX}.om.",
        "On a host with the CANN toolkit, run:",
        f"  source {SET_ENV_EXAMPLE}   # your CANN install's set_env.sh",
    ]
    steps = installed.install_steps(
        [OPS_BY_NAME[name] for name in result.custom_ops], result.manifest.soc or "SOC"
    )
    if result.custom_ops:
        lines += [
            f"  # the model uses edgefuse custom ops ({custom_ops_text(result.custom_ops)}): ATC "
            "fails with E19010 unless their op package is installed, so compile.sh checks:",
            f"  {steps['build']}",
            f"  # then {steps['install']}",
        ]
    lines.append(f"  bash {result.output_dir / SCRIPT_FILE}")
    if result.custom_ops:
        lines.append(f"Without the op package: {steps['without']}")
    return "\n".join(lines)


def custom_ops_text(counts: Mapping[str, int]) -> str:
    """``Swish x57, YoloHead x1``."""
    return ", ".join(f"{name} x{count}" for name, count in counts.items())


def count_custom_ops(model: onnx.ModelProto) -> dict[str, int]:
    """edgefuse op -> number of its nodes, in either spelling (``edgefuse`` or default domain)."""
    counts: dict[str, int] = {}
    for node in all_nodes(model.graph):
        if node.op_type in OPS_BY_NAME and node.domain in (CUSTOM_DOMAIN, "", "ai.onnx"):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def _check_custom_ops_run_on(specs: Sequence[OpSpec], soc: str) -> None:
    family = validate_soc(soc).short_name
    refused = [spec for spec in specs if not spec.runs_on(family)]
    if refused:
        raise InputError(
            f"the model uses {', '.join(spec.name for spec in refused)}, whose kernel cannot "
            f"run on {soc}: " + "; ".join(spec.unsupported_reason for spec in refused),
            hint="compile with --no-custom-ops to decompose the custom ops into standard ONNX "
            "ops, or optimize the model without them",
            reference=Ref.OP_NOT_ON_SOC,
        )


def _yolo_head_warnings(model: onnx.ModelProto, soc: str, buffer: UnifiedBuffer) -> list[str]:
    """A warning per YoloHead whose threshold likely overflows the kernel's candidate cap (the
    cap of ``buffer``'s Unified Buffer size: the toolkit's where it is present)."""
    family = validate_soc(soc).short_name
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {
        value.name: [d.dim_value if d.HasField("dim_value") else None
                     for d in value.type.tensor_type.shape.dim]
        for value in (*inferred.graph.input, *inferred.graph.value_info)
    }
    warnings = []
    for node in all_nodes(model.graph):
        if node.op_type != "YoloHead" or node.domain not in (CUSTOM_DOMAIN, "", "ai.onnx"):
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        shape = dims.get(node.input[0], [])
        boxes = shape[2] if len(shape) == 3 else None
        warning = overflow_warning(family, attrs, boxes, node.name or node.output[0],
                                   buffer.bytes)
        if warning is not None:
            warnings.append(warning)
    return warnings


def _decomposed_nms_warnings(model: onnx.ModelProto) -> list[str]:
    """A warning per YoloHead whose decomposition asks CANN's NMS for more than it documents."""
    warnings = []
    for node in all_nodes(model.graph):
        if node.op_type == "YoloHead" and node.domain in (CUSTOM_DOMAIN, "", "ai.onnx"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            warning = nms_limit_warning(attrs, node.name or node.output[0])
            if warning is not None:
                warnings.append(warning)
    return warnings


def _custom_ops_json(
    used: Mapping[str, int], decomposed: Mapping[str, int], soc: str,
    warnings: Sequence[str] = (), buffer: UnifiedBuffer | None = None,
) -> dict[str, Any]:
    """The manifest's record of the op package the OM needs (or of the ops decomposed); with a
    YoloHead kernel, the Unified Buffer size its cap was computed from (sim reads it back)."""
    record: dict[str, Any] = {"required": bool(used)}
    if buffer is not None:
        record["unified_buffer"] = buffer.to_json()
    if warnings:
        record["warnings"] = list(warnings)
    if decomposed:
        record["decomposed"] = dict(decomposed)
    if not used:
        return record
    specs = [OPS_BY_NAME[name] for name in used]
    steps = installed.install_steps(specs, soc)
    record.update(
        package=f"edgefuse custom-op package (vendor '{VENDOR}' unless built with --vendor)",
        ops=[{"onnx": f"{CUSTOM_DOMAIN}::{name}", "ascend_type": OPS_BY_NAME[name].ascend_type,
              "nodes": count} for name, count in used.items()],
        soc=soc,
        cann={"targets": CANN_RANGE, "min": ".".join(map(str, CANN_MIN)),
              "below": ".".join(map(str, CANN_BELOW))},
        build=steps["build"],
        install=steps["install"],
        checked_by=f"{SCRIPT_FILE}, before atc (ASCEND_CUSTOM_OPP_PATH, then "
        "${ASCEND_OPP_PATH}/vendors/config.ini); edgefuse compile, before it runs atc",
        without=steps["without"],
    )
    return record


# ---- steps --------------------------------------------------------------------------------------


def _resolve_soc(soc: str | None) -> str:
    if soc is not None:
        return validate_soc(soc).name
    detected = detect_soc()
    if detected is None:
        raise InputError(
            "no --soc given and this host has no npu-smi to detect it",
            hint="pass --soc, e.g. --soc Ascend310B4; the Atlas 200I DK A2 reports Ascend310B1 "
            "or Ascend310B4 depending on its image: run `npu-smi info` on the board to see which",
            reference=Ref.UNKNOWN_SOC,
        )
    logger.info("detected soc %s with npu-smi", detected)
    return detected


def edgefuse_plugins() -> tuple[str, ...]:
    """Parser registrations of the edgefuse ops: ``edgefuse::1::Swish``, ``ai.onnx::11::Swish``.

    With these, prepare moves the custom nodes into the default domain (as mmdeploy does), since
    ATC refuses default-domain nodes in a model that imports a second domain (E16005).
    """
    return tuple(origin for spec in ALL_OPS for origin in spec.origin_op_types())


def _check_output_dir(out: Path, overwrite: bool) -> None:
    if not out.parent.is_dir():
        raise InputError(
            f"the parent of '{out}' does not exist",
            hint=f"create it first: mkdir -p {out.parent}",
            reference=Ref.BAD_OUTPUT_PATH,
        )
    if out.exists() and not out.is_dir():
        raise InputError(
            f"'{out}' is a file, not a build directory",
            hint="choose another -o; --force only replaces a previous build directory",
            reference=Ref.BAD_OUTPUT_PATH,
        )
    if out.exists() and not overwrite:
        raise InputError(
            f"'{out}' already exists",
            hint="choose another -o, or pass --force to replace a previous build directory",
            reference=Ref.BAD_OUTPUT_PATH,
        )


def _unsupported(report: OpSupportReport, soc: str) -> UnsupportedOpsError:
    listing = [
        f"{subject}: [{finding.check}] {finding.message}" for subject, finding in report.errors
    ]
    return UnsupportedOpsError(
        f"{len(report.errors)} problem(s) that ATC's ONNX parser will refuse for {soc}",
        context="\n".join(listing),
        hint="see `edgefuse inspect MODEL --target SOC` for each node's details and fixes",
    )


def _declared_dims(model: onnx.ModelProto, name: str) -> list[int | str | None]:
    value = next(v for v in model.graph.input if v.name == name)
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
        for d in value.type.tensor_type.shape.dim
    ]


def _atc_input_shape(model: onnx.ModelProto, input_names: Sequence[str]) -> dict[str, list[int]]:
    return {
        name: [d if isinstance(d, int) else -1 for d in _declared_dims(model, name)]
        for name in input_names
    }


def _aipp_record(model: onnx.ModelProto, names: Sequence[str], spec: AippSpec,
                 image_gears: Sequence[tuple[int, int]] | None = None) -> AippRecord:
    """Where AIPP feeds the model, after checking that AIPP's output fits that input. With
    image-size gears the input's H and W are the gears', and the spec's size must be one of
    them (it is the frame size the host replays; the board takes a frame of any gear)."""
    name = spec.input or names[0]
    if name not in names:
        raise InputError(
            f"the AIPP spec names input '{name}', which the model does not have",
            hint=f"the model's inputs: {', '.join(names)}",
            reference=Ref.BAD_AIPP_SPEC,
        )
    declared = dims = _declared_dims(model, name)
    width, height = spec.output_size
    if image_gears is not None:
        if spec.crop is not None:
            raise InputError(
                "static AIPP with image-size gears cannot crop: CANN takes the source size from "
                "each run's gear (src_image_size_w/h 0) and allows no crop or padding",
                hint="drop 'crop' from the AIPP spec (aclpythondevg_0044)",
                reference=Ref.BAD_AIPP_SPEC,
            )
        if (height, width) not in [tuple(g) for g in image_gears]:
            raise InputError(
                f"the AIPP spec's source_size {width}x{height} is not one of the image-size "
                f"gears {[list(g) for g in image_gears]} (height, width)",
                hint="give the source_size of one gear (the frame size host runs replay)",
                reference=Ref.BAD_AIPP_SPEC,
            )
        dims = [*dims[:2], height, width]
    if len(dims) != 4 or dims[1] != 3 or dims[2:] != [height, width]:
        raise InputError(
            f"AIPP outputs 3x{height}x{width} but input '{name}' is {dims}",
            hint="AIPP feeds an NCHW input with C=3; its crop (or source size) must equal H, W",
            reference=Ref.BAD_AIPP_SPEC,
        )
    elem = next(v for v in model.graph.input if v.name == name).type.tensor_type.elem_type
    if elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
        raise InputError(
            f"input '{name}' is {onnx.TensorProto.DataType.Name(elem)}; AIPP feeds float inputs",
            reference=Ref.BAD_AIPP_SPEC,
        )
    return AippRecord(input=name, related_input_rank=list(names).index(name), spec=spec,
                      config=AIPP_FILE, model_input_layout="NCHW",
                      model_input_shape=tuple(declared))


def _entry(value: onnx.ValueInfoProto, dims: Sequence[int | str | None]) -> TensorEntry:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
    return TensorEntry(value.name, tuple(dims), dtype, "NCHW" if len(dims) == 4 else None)


def _input_entries(
    model: onnx.ModelProto, names: Sequence[str], aipp: AippRecord | None
) -> tuple[TensorEntry, ...]:
    """The inputs as the board sees them: the AIPP input becomes the uint8 frame."""
    entries = []
    for value in model.graph.input:
        if value.name not in names:
            continue
        dims = _declared_dims(model, value.name)
        if aipp is not None and value.name == aipp.input:
            layout = "NHWC" if not aipp.spec.is_yuv else aipp.spec.input_format
            entries.append(TensorEntry(value.name, (dims[0], *aipp.frame_shape), "uint8", layout))
        else:
            entries.append(_entry(value, dims))
    return tuple(entries)


def _output_entries(model: onnx.ModelProto, output_type: str | None) -> tuple[TensorEntry, ...]:
    """The outputs as the OM gives them: the model's dtypes, or ``output_type`` for float ones.

    ATC keeps "the dtype of the original network's last operator's output" unless
    ``--output_type`` is given, which then applies to every output (atlasatcparam_16_0030);
    edgefuse refuses it for a model with a non-float output rather than guess what ATC makes of
    an integer count or class id converted to a float type.
    """
    entries = []
    for value in model.graph.output:
        dims = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim
        ]
        entry = dataclasses.replace(_entry(value, dims), layout=None)
        if output_type is not None:
            if entry.dtype not in ("float32", "float16"):
                raise InputError(
                    f"--output-type {output_type} applies to every output, and output "
                    f"'{entry.name}' is {entry.dtype}",
                    hint="drop --output-type for this model (its float outputs then keep the "
                    "model's own dtype)",
                    reference=Ref.BAD_ATC_OPTIONS,
                )
            entry = dataclasses.replace(entry, dtype=OUTPUT_TYPES[output_type])
        entries.append(entry)
    return tuple(entries)


def _gears_json(
    gears: Gears,
    dynamic_batch: Sequence[int] | None,
    dynamic_image_size: Sequence[tuple[int, int]] | None,
) -> dict[str, Any] | None:
    if gears.empty:
        return None
    return {
        "dynamic_batch": list(dynamic_batch) if dynamic_batch is not None else None,
        "dynamic_image_size": [list(g) for g in dynamic_image_size] if dynamic_image_size else None,
        "dims": {name: list(dims) for name, dims in gears.dims.items()},
    }


def _script(options: AtcOptions, soc: str, specs: Sequence[OpSpec] = ()) -> str:
    check = installed.check_script(specs, soc) if specs else ""
    return (
        "#!/usr/bin/env bash\n"
        f"# Compile {MODEL_FILE} into {OM_PREFIX}.om for {soc} with ATC "
        f"(written by edgefuse {__version__}).\n"
        "# Run it on a host with the CANN toolkit after sourcing its set_env.sh,\n"
        f"# e.g. `source {SET_ENV_EXAMPLE}`.\n"
        "set -euo pipefail\n"
        'cd "$(dirname "$0")"\n'
        f"{check}"
        f"{options.to_shell()}\n"
    )


def _write(path: Path, text: str, *, executable: bool = False) -> None:
    path.write_text(text, encoding="utf-8")  # inside the staging directory: atomic as a whole
    if executable:
        path.chmod(0o755)


def _move_into_place(staging: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished staging directory to ``out``; an old build is replaced only now."""
    if overwrite and out.is_dir():
        retired = temporary_directory_in(out.parent, f".{out.name}.old.")
        os.replace(out, retired / out.name)
        os.replace(staging, out)
        shutil.rmtree(retired, ignore_errors=True)
        return
    os.replace(staging, out)
