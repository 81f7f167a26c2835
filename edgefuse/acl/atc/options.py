"""The ATC command line as data: ``AtcOptions`` -> the exact argv, validated before ATC sees it.

Why validate here: ATC reports option conflicts late (after parsing the model) or not at all (a
``--keep_dtype`` under ``must_keep_origin_dtype`` is silently ignored). Every rule below is
documented by CANN; the page is named next to it.

Option reference (hiascend ATC parameter pages, CANN 8.x unless noted):
- ``--framework=5`` is ONNX; ``--output`` is a path prefix, ``.om`` is appended
  (Ascend/samples growthpath/junior-level/3_model_conversion/README_CN.md).
- ``--dynamic_batch_size`` / ``--dynamic_image_size`` / ``--dynamic_dims`` are mutually exclusive;
  each needs ``--input_shape`` with ``-1`` in the dynamic places, between 2 and 100 gears, each
  batch value recommended in [1, 2048]; ``--dynamic_batch_size`` only for N first in the shape
  (devaids/atctool/atlasatcparam_16_0018.html). ``--dynamic_dims`` also needs ``--input_format=ND``
  and excludes ``--insert_op_conf`` (Atlas200IDKA2DeveloperKit 23.0.RC2 atctool_000056.html).
- ``--keep_dtype`` has no effect with ``must_keep_origin_dtype`` (atlasatcparam_16_0074.html).
- ``--modify_mixlist`` only applies to ``allow_mix_precision`` modes (reference §1.5,
  Atlas200IDKA2DeveloperKit 23.0.RC2 atctool_000096.html).
- ``--log`` takes debug|info|warning|error|null (canncommercial/800 atc/atlasatcparam_16_0082.html).
- ``--output_type`` sets the dtype of every network output (FP32, FP16, UINT8, ...; a per-node form
  needs ``--out_nodes``); without it "the dtype of the original network's last operator's
  output" is kept, i.e. float32 for an FP32 ONNX whatever the precision mode
  (canncommercial/latest devaids/atctool/atlasatcparam_16_0030.html). edgefuse offers the two
  float types, for float outputs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from edgefuse.errors import InputError, Ref

PRECISION_MODES: tuple[str, ...] = (
    # aoepar_16_042 (CANN 8.0.RC1): the --precision_mode values for inference.
    "force_fp16",  # ATC's default for inference: fp16 wherever the op supports it
    "allow_fp32_to_fp16",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "must_keep_origin_dtype",
    "force_fp32",
    "cube_fp16in_fp32out",
)
MIXED_PRECISION_MODES = ("allow_mix_precision", "allow_mix_precision_fp16")
# The only mode under which ATC ignores --keep_dtype: "does not take effect when --precision_mode
# is set to must_keep_origin_dtype" (atlasatcparam_16_0074, canncommercial/800 and /850). Under
# force_fp32 and cube_fp16in_fp32out it still applies, so it is written there too.
KEEP_DTYPE_IGNORED_MODES = ("must_keep_origin_dtype",)
# The high-precision modes INT8 calibration (--compression_optimize_conf) cannot be combined
# with: "force_fp32 or must_keep_origin_dtype" (atlasatcparam_16_0059, canncommercial latest).
INT8_CONFLICTING_MODES = ("force_fp32", "must_keep_origin_dtype")
LOG_LEVELS = ("debug", "info", "warning", "error", "null")
# --output_type values edgefuse writes, and the numpy dtype each gives the OM's float outputs.
OUTPUT_TYPES: dict[str, str] = {"FP32": "float32", "FP16": "float16"}
MAX_GEARS = 100
MAX_GEAR_VALUE = 2048

_SAFE_SHELL = re.compile(r"^[A-Za-z0-9_./=:,+-]+$")


@dataclasses.dataclass(frozen=True)
class AtcOptions:
    """One ATC invocation. Paths are as ATC will see them (edgefuse runs ATC in BUILD_DIR)."""

    model: str
    output: str
    soc_version: str
    input_shape: Mapping[str, Sequence[int]]
    precision_mode: str = "force_fp16"
    insert_op_conf: str | None = None
    keep_dtype: str | None = None
    modify_mixlist: str | None = None
    dynamic_batch_size: Sequence[int] | None = None
    dynamic_image_size: Sequence[tuple[int, int]] | None = None
    dynamic_dims: Sequence[Sequence[int]] | None = None
    output_type: str | None = None
    compression_optimize_conf: str | None = None
    enable_small_channel: bool = False
    log: str = "error"
    # The --insert_op_conf leaves the source size to the gears: src_image_size_w/h = 0, no crop
    # and no padding, the one way CANN documents to combine static AIPP with
    # --dynamic_image_size (aclpythondevg_0044 / canncommercial/800 aclpythondevg_0043).
    aipp_size_from_gears: bool = False

    def __post_init__(self) -> None:
        _validate(self)

    def to_argv(self) -> list[str]:
        """The argv, ``atc`` first, in the order a CANN user writes it."""
        argv = [
            "atc",
            "--framework=5",
            f"--model={self.model}",
            f"--output={self.output}",
            f"--soc_version={self.soc_version}",
        ]
        if self.dynamic_dims is not None:
            argv.append("--input_format=ND")
        argv.append(f"--input_shape={format_input_shape(self.input_shape)}")
        if self.dynamic_batch_size is not None:
            argv.append(f"--dynamic_batch_size={','.join(map(str, self.dynamic_batch_size))}")
        if self.dynamic_image_size is not None:
            gears = ";".join(f"{h},{w}" for h, w in self.dynamic_image_size)
            argv.append(f"--dynamic_image_size={gears}")
        if self.dynamic_dims is not None:
            gears = ";".join(",".join(map(str, gear)) for gear in self.dynamic_dims)
            argv.append(f"--dynamic_dims={gears}")
        argv.append(f"--precision_mode={self.precision_mode}")
        if self.insert_op_conf is not None:
            argv.append(f"--insert_op_conf={self.insert_op_conf}")
        if self.keep_dtype is not None:
            argv.append(f"--keep_dtype={self.keep_dtype}")
        if self.modify_mixlist is not None:
            argv.append(f"--modify_mixlist={self.modify_mixlist}")
        if self.output_type is not None:
            argv.append(f"--output_type={self.output_type}")
        if self.compression_optimize_conf is not None:
            argv.append(f"--compression_optimize_conf={self.compression_optimize_conf}")
        if self.enable_small_channel:
            argv.append("--enable_small_channel=1")
        argv.append(f"--log={self.log}")
        return argv

    def to_shell(self) -> str:
        """The argv as one shell command, continued over lines, quoted the way people write it."""
        args = [shell_quote(arg) for arg in self.to_argv()]
        return " \\\n    ".join(args)


def format_input_shape(input_shape: Mapping[str, Sequence[int]]) -> str:
    """``{"x": (1, 3, 224, 224)}`` -> ``x:1,3,224,224`` (several inputs joined by ``;``)."""
    return ";".join(f"{name}:{','.join(map(str, dims))}" for name, dims in input_shape.items())


def shell_quote(arg: str) -> str:
    """Quote for bash; ``--key=value`` keeps the key bare and double-quotes the value."""
    if _SAFE_SHELL.match(arg):
        return arg
    key, sep, value = arg.partition("=")
    escaped = re.sub(r'(["\\$`])', r"\\\1", value if sep else arg)
    if sep and key.startswith("--") and _SAFE_SHELL.match(key):
        return f'{key}="{escaped}"'
    return f'"{escaped}"'


def _bad(message: str, hint: str | None = None) -> InputError:
    return InputError(message, hint=hint, reference=Ref.BAD_ATC_OPTIONS)


def _validate(options: AtcOptions) -> None:
    if options.precision_mode not in PRECISION_MODES:
        raise _bad(
            f"unknown precision mode '{options.precision_mode}'",
            hint="one of " + ", ".join(PRECISION_MODES),
        )
    if options.output_type is not None and options.output_type not in OUTPUT_TYPES:
        raise _bad(f"unknown output type '{options.output_type}'",
                   hint="one of " + ", ".join(OUTPUT_TYPES))
    if options.log not in LOG_LEVELS:
        raise _bad(f"unknown ATC log level '{options.log}'", hint="one of " + ", ".join(LOG_LEVELS))
    if not options.input_shape:
        raise _bad("--input_shape needs at least one input")
    for name, dims in options.input_shape.items():
        if any(d == 0 or d < -1 for d in dims):
            raise _bad(f"input '{name}' has an invalid dimension in {list(dims)}")
    gear_options = [
        flag
        for flag, value in (
            ("--dynamic_batch_size", options.dynamic_batch_size),
            ("--dynamic_image_size", options.dynamic_image_size),
            ("--dynamic_dims", options.dynamic_dims),
        )
        if value is not None
    ]
    if len(gear_options) > 1:
        raise _bad(
            f"{' and '.join(gear_options)} cannot be used together",
            hint="ATC accepts one kind of gear per model",
        )
    dynamic = {name: dims for name, dims in options.input_shape.items() if -1 in dims}
    if dynamic and not gear_options:
        raise _bad(
            f"inputs {sorted(dynamic)} have -1 dimensions but no gears are given",
            hint="310/310B run static shapes or gears only: pass --dynamic-batch or "
            "--dynamic-image-size, or fix the shape",
        )
    if options.dynamic_batch_size is not None:
        _check_batch_gears(options)
    if options.dynamic_image_size is not None:
        _check_image_gears(options)
    if options.dynamic_dims is not None:
        _check_dims_gears(options)
    if options.aipp_size_from_gears and (options.insert_op_conf is None
                                         or options.dynamic_image_size is None):
        raise _bad("an AIPP source size from the gears needs --insert_op_conf and "
                   "--dynamic_image_size")
    if options.keep_dtype is not None and options.precision_mode in KEEP_DTYPE_IGNORED_MODES:
        raise _bad(
            f"--keep_dtype has no effect with --precision_mode={options.precision_mode}",
            hint="every op already keeps fp32 in that mode; drop the keep list",
        )
    if options.compression_optimize_conf is not None and \
            options.precision_mode in INT8_CONFLICTING_MODES:
        raise InputError(
            f"INT8 calibration cannot be combined with --precision_mode="
            f"{options.precision_mode}: CANN documents that the quantized model then gets "
            "neither INT8's speed nor the high-precision mode's accuracy",
            hint="compile INT8 with force_fp16 (the default) or a mixed mode; keep accuracy-"
                 "critical layers with quantize --int8 --keep-fp16 instead",
            reference=Ref.INT8_PRECISION_CONFLICT,
        )
    if options.modify_mixlist is not None and options.precision_mode not in MIXED_PRECISION_MODES:
        raise _bad(
            f"--modify_mixlist only applies to {' / '.join(MIXED_PRECISION_MODES)}, "
            f"not {options.precision_mode}",
        )


def _check_gear_count(flag: str, count: int) -> None:
    if not 1 < count <= MAX_GEARS:
        raise _bad(f"{flag} needs between 2 and {MAX_GEARS} gears, got {count}")


def _check_batch_gears(options: AtcOptions) -> None:
    gears = list(options.dynamic_batch_size or ())
    _check_gear_count("--dynamic_batch_size", len(gears))
    if len(set(gears)) != len(gears) or any(not 1 <= g <= MAX_GEAR_VALUE for g in gears):
        raise _bad(f"--dynamic_batch_size gears must be distinct and in [1, {MAX_GEAR_VALUE}]")
    for name, dims in options.input_shape.items():
        if -1 in dims[1:]:
            raise _bad(
                f"input '{name}' is dynamic beyond its first dimension {list(dims)}",
                hint="--dynamic_batch_size only supports N first; use --dynamic_dims otherwise",
            )
    if not any(dims[0] == -1 for dims in options.input_shape.values()):
        raise _bad("--dynamic_batch_size needs -1 as the batch dimension of an input")


def _check_image_gears(options: AtcOptions) -> None:
    gears = list(options.dynamic_image_size or ())
    _check_gear_count("--dynamic_image_size", len(gears))
    if any(h < 1 or w < 1 for h, w in gears) or len(set(gears)) != len(gears):
        raise _bad("--dynamic_image_size gears must be distinct positive (height, width) pairs")
    for name, dims in options.input_shape.items():
        nchw_hw_only = len(dims) == 4 and -1 not in dims[:2] and list(dims[2:]) == [-1, -1]
        if -1 in dims and not nchw_hw_only:
            raise _bad(
                f"input '{name}' shape {list(dims)} is not NCHW with -1 as H and W",
                hint="--dynamic_image_size gears H and W of NCHW inputs only",
            )
    # Static AIPP with image-size gears: "the width and height of the input image are uncertain"
    # at conversion, so the AIPP file must set src_image_size_w/h to 0 and use neither crop nor
    # padding (pyACL "AIPP" restrictions: hiascend aclpythondevg_0044; canncommercial/800
    # appdevg/aclpythondevg/aclpythondevg_0043.html). compile writes such a file and says so.
    if options.insert_op_conf is not None and not options.aipp_size_from_gears:
        raise _bad(
            "static AIPP with image-size gears needs an AIPP file whose source size comes from "
            "the gears (src_image_size_w/h 0, no crop, no padding)",
            hint="let `edgefuse compile --aipp SPEC --dynamic-image-size ...` write it (a spec "
                 "without crop), or use --dynamic-batch instead of --dynamic-image-size",
        )


def _check_dims_gears(options: AtcOptions) -> None:
    gears = [tuple(g) for g in options.dynamic_dims or ()]
    _check_gear_count("--dynamic_dims", len(gears))
    unknowns = sum(list(dims).count(-1) for dims in options.input_shape.values())
    if any(len(g) != unknowns for g in gears):
        raise _bad(f"each --dynamic_dims gear must give {unknowns} values, one per -1")
    if options.insert_op_conf is not None:
        raise _bad("--dynamic_dims cannot be combined with AIPP (--insert_op_conf)")
