"""INT8 for the board: the calibration folder ATC's ``--compression_optimize_conf`` reads.

Why a folder and not a quantized ONNX: on Ascend, INT8 post-training quantization happens inside
ATC (AMCT's calibration run as part of the conversion), not in the ONNX file. ATC needs, per model
input, a raw ``.bin`` of calibration data and its shape, plus an optional "simple quantization
config" that says which layers to leave unquantized and which algorithms to use. edgefuse writes
exactly those, from real frames through the model's own preprocessing (the same feeds as the FP16
stage: a folder of images, a video, .npz files) — never from noise: activation ranges calibrated
on random inputs describe noise, not the camera, so ``inputs=None`` is refused, not defaulted.

Formats (CANN ATC, "--compression_optimize_conf", atlasatcparam_16_0059,
https://www.hiascend.com/document/detail/zh/canncommercial/latest/devaids/atctool/atlasatcparam_16_0059.html;
supported on Atlas 200I/500 A2; the same text in aoerc_16_0054):

    calibration:
    {
    input_data_dir: ./a.bin,b.bin        # required: one .bin per model input, comma-separated
    input_shape: in:16,16;in1:16,16      # required: name:dims per input, ';'-separated
    config_file: simple_config.cfg       # optional: the simple quantization config
    infer_soc: Ascend310B4               # required: the chip the calibration inference runs on
    log: info
    }

Paths and file names in it may only hold ``[A-Za-z0-9_.-]`` (and CJK), so the .bin files are
named ``input<i>.bin`` and input names carrying ``:``, ``;`` or ``,`` are refused (they would
break ``input_shape``). The page also says calibration cannot be combined with the high-precision
modes (``force_fp32``, ``must_keep_origin_dtype``, ``--op_precision_mode`` high_precision): the
compile stage refuses those (``edgefuse.acl.compile.int8``).

Simple quantization config (量化简易配置文件, calibration_config.proto, aoepar_16_077,
https://www.hiascend.com/document/detail/zh/canncommercial/latest/devaids/aoe/aoepar_16_077.html):
a protobuf text file with ``batch_num``, ``activation_offset`` (true: activations asymmetric, with
an offset), repeated ``skip_layers`` (layer names left unquantized, i.e. FP16 on the board),
``skip_layer_types`` and ``common_config`` holding ``arq_quantize { channel_wise }`` (weights:
ARQ, symmetric, one scale per output channel when channel_wise) and ``ifmr_quantize`` (activations:
IFMR's clipping search, ``search_range_start/end``, ``search_step``, ``max/min_percentile``).
edgefuse writes the IFMR parameters explicitly (CANN's defaults unless changed) from the same
``IfmrConfig`` the host emulation calibrates with (``edgefuse.quantize.ifmr``), so the scheme the
board uses is on record and is the one the emulation reproduces: per-channel symmetric weights,
per-tensor activations with an offset and an IFMR-searched clipping range.

``keep_fp16`` may hold ``auto``: the layers to keep FP16 are then chosen by measured sensitivity
until the task metric under the host's INT8 emulation is within ``max_drop`` points of FP16's
(``edgefuse.quantize.int8_mixed``); the choice becomes ``skip_layers`` and ``int8_report.json``
says what each kept layer buys.

The calibration samples are stacked along the batch axis into one array per input: ``batch_num``
is 1 and ``input_shape``'s first dimension is the number of samples.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from edgefuse import model_info
from edgefuse._checks import number_in
from edgefuse._files import publish_directory, temporary_directory_in
from edgefuse.acl.compile.soc import validate_soc
from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Preprocess
from edgefuse.quantize.ifmr import CANN_DEFAULTS, IfmrConfig
from edgefuse.quantize.int8_emulate import EMULATED_MODEL, Int8Emulation
from edgefuse.quantize.int8_mixed import DEFAULT_MAX_DROP, MixedInt8Result, choose_fp16_layers
from edgefuse.reference.feeds import FeedSource, calibration_preprocess, feed_set, input_specs
from edgefuse.verify.task import TASKS

COMPRESSION_CONFIG = "compression_optimize.cfg"
SIMPLE_CONFIG = "simple_config.cfg"
RECORD = "int8.json"
REPORT = "int8_report.json"
RECORD_FORMAT = 1
DEFAULT_INFER_SOC = "Ascend310B4"
# ONNX op types AMCT quantizes (Conv, Gemm, MatMul, ConvTranspose): the layers --keep-fp16 may
# name; the INT8 peak of ``edgefuse profile`` applies to these.
QUANTIZABLE_OP_TYPES = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
# Inputs whose neighbouring values along a spatial axis correlate below NOISE_CORRELATION in every
# sample are refused as noise: camera frames correlate far above it (the test photos, resized to
# 32x32: 0.66 to 0.83; at 320x320: 0.93 to 0.98; random draws: |r| < 0.01). Below NOISE_MIN_SIZE
# pixels a downscaled photo can decorrelate (one at 8x8: 0.03), so smaller inputs are not judged.
NOISE_CORRELATION = 0.1
NOISE_MIN_SIZE = 32
_ATC_PATH_CHARACTERS = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_BAD_NAME_CHARACTERS = re.compile(r"[:;,\s]")


@dataclasses.dataclass(frozen=True)
class CalibrationInput:
    name: str
    file: str  # relative to the folder
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Int8Calibration:
    """What ``write_int8_calibration`` wrote (also ``int8.json`` in the folder)."""

    folder: Path
    inputs: tuple[CalibrationInput, ...]
    keep_fp16: tuple[str, ...]
    infer_soc: str
    samples: int
    source: str
    emulated: str | None = None  # the host emulation's QDQ model, in the folder
    ifmr: IfmrConfig = CANN_DEFAULTS
    mixed: MixedInt8Result | None = None  # the automatic choice of layers kept FP16

    def to_json(self) -> dict:
        return {
            "format": RECORD_FORMAT,
            "inputs": [{"name": i.name, "file": i.file, "shape": list(i.shape)}
                       for i in self.inputs],
            "keep_fp16": list(self.keep_fp16),
            "infer_soc": self.infer_soc,
            "samples": self.samples,
            "source": self.source,
            "compression_config": COMPRESSION_CONFIG,
            "host_emulation": None if self.emulated is None else {
                "model": self.emulated,
                "note": "ONNX Runtime QDQ, activation ranges from the IFMR search of the simple "
                        "config: a prediction until a board confirms it (run --record on the "
                        "board, then verify --against the recording)"},
            "automatic_keep_fp16": None if self.mixed is None else {
                "report": REPORT, "task": self.mixed.task, "metric": self.mixed.metric,
                "fp16": self.mixed.fp16, "int8_all_layers": self.mixed.all_int8,
                "int8_mixed": self.mixed.mixed, "max_drop_points": self.mixed.max_drop,
                "passed": self.mixed.passed},
            "simple_config": SIMPLE_CONFIG,
            "ifmr": {**self.ifmr.proto_fields(),
                     "activation_offset": self.ifmr.activation_offset},
            "scheme": {"weights": "int8, symmetric, per output channel (ARQ, channel_wise)",
                       "activations": "int8, per tensor, "
                                      + ("with an offset" if self.ifmr.activation_offset
                                         else "symmetric") + " (IFMR)"},
        }


def write_int8_calibration(
    model: str | os.PathLike[str] | onnx.ModelProto,
    output_dir: str | os.PathLike[str],
    *,
    inputs: FeedSource | None,
    keep_fp16: str | Sequence[str] = (),
    infer_soc: str = DEFAULT_INFER_SOC,
    preprocess: Preprocess | str | os.PathLike[str] | None = None,
    emulate: bool = False,
    task: str | None = None,
    max_drop: float = DEFAULT_MAX_DROP,
    ifmr: IfmrConfig = CANN_DEFAULTS,
    max_evaluations: int = 40,
    budget_s: float = 600.0,
) -> Int8Calibration:
    """Write ``output_dir``: one ``input<i>.bin`` per model input (float32, the samples stacked on
    the batch axis), ``simple_config.cfg`` (``keep_fp16`` as ``skip_layers``),
    ``compression_optimize.cfg`` (paths relative to the folder: run ATC from inside it) and
    ``int8.json`` (what ``compile --int8`` reads). Written into a temporary folder beside it and
    renamed into place: an existing ``output_dir`` is refused, nothing half-written is left.
    With ``emulate``, also ``host_int8.qdq.onnx``: the host emulation of the board's INT8
    (``int8_emulate``), for ``verify MODEL FOLDER/host_int8.qdq.onnx --per-layer``.
    ``keep_fp16`` holding ``"auto"`` (with or without layer names, which are then always kept)
    chooses the layers to keep FP16 by ``task``'s metric (default: the task the model's embedded
    app info names) within ``max_drop`` points of FP16; it implies ``emulate`` and writes
    ``int8_report.json``.
    """
    if inputs is None:
        raise InputError(
            "INT8 calibration needs real inputs: without --inputs edgefuse would calibrate on "
            "random noise, and activation ranges measured on noise are not those of the camera",
            hint="pass --inputs with a folder of images or a video of the scene the model will "
                 "see (or .npz files made through its preprocessing)",
            reference=Ref.INT8_NEEDS_REAL_INPUTS,
        )
    soc = validate_soc(infer_soc).name
    out = Path(output_dir)
    _check_output_folder(out)
    loaded = load_model(model)
    specs = input_specs(loaded)
    for spec in specs:
        if _BAD_NAME_CHARACTERS.search(spec.name):
            raise InputError(
                f"input name '{spec.name}' holds a character (':', ';', ',' or a space) that "
                "ATC's calibration input_shape uses as a separator",
                hint="rename the input in the ONNX model (e.g. onnx.compose or the exporter's "
                     "input_names)",
                reference=Ref.BAD_CALIBRATION_INPUTS,
            )
        if spec.dtype.kind != "f":
            raise InputError(
                f"input '{spec.name}' is {spec.dtype}: ATC's INT8 calibration reads float "
                "calibration data",
                hint="quantize the FP32 model, whose image input is float (AIPP is added by "
                     "compile)",
                reference=Ref.BAD_CALIBRATION_INPUTS,
            )
    items = _keep_items(keep_fp16)
    auto = "auto" in items
    keep = _check_keep_fp16(loaded, [name for name in items if name != "auto"])
    if auto:
        task = resolve_task(loaded, task)
        max_drop = number_in("max_drop", max_drop, 0.0, 100.0)
        if not isinstance(max_evaluations, int) or not isinstance(budget_s, (int, float)) or \
                max_evaluations < 1 or not budget_s > 0:
            raise InputError("the search needs at least one evaluation and a positive time budget",
                             context=f"max_evaluations={max_evaluations!r}, budget={budget_s!r}",
                             reference=Ref.BAD_SEARCH_BUDGET)
    feeds = feed_set(specs, inputs, preprocess=calibration_preprocess(loaded, preprocess))
    stacked = _stack(specs, feeds)
    _refuse_noise(stacked, inputs)
    emulation = Int8Emulation(loaded, feeds, op_types=QUANTIZABLE_OP_TYPES, config=ifmr) \
        if emulate or auto else None
    mixed = None
    if auto:
        mixed = choose_fp16_layers(emulation, feeds, task=task, forced=keep, max_drop=max_drop,
                                   max_evaluations=max_evaluations, budget_s=budget_s)
        keep = mixed.keep

    staging = temporary_directory_in(out.parent, f".{out.name}.")
    try:
        publish_directory(staging)
        entries = []
        for index, (name, array) in enumerate(stacked.items()):
            file = f"input{index}.bin"
            array.astype(np.float32).tofile(staging / file)
            entries.append(CalibrationInput(name, file, tuple(array.shape)))
        result = Int8Calibration(out, tuple(entries), keep, soc, len(feeds),
                                 str(inputs) if isinstance(inputs, (str, os.PathLike))
                                 else "in-memory",
                                 EMULATED_MODEL if emulation is not None else None, ifmr, mixed)
        if emulation is not None:
            onnx.save(emulation.model_keeping(keep), staging / EMULATED_MODEL)
        if mixed is not None:
            (staging / REPORT).write_text(json.dumps(mixed.to_json(), indent=2) + "\n",
                                          encoding="utf-8")
        (staging / SIMPLE_CONFIG).write_text(simple_config_text(keep, ifmr), encoding="utf-8")
        (staging / COMPRESSION_CONFIG).write_text(
            compression_config_text(result.inputs, soc, prefix="./"), encoding="utf-8")
        (staging / RECORD).write_text(json.dumps(result.to_json(), indent=2) + "\n",
                                      encoding="utf-8")
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


def simple_config_text(keep_fp16: Sequence[str], ifmr: IfmrConfig = CANN_DEFAULTS) -> str:
    """The simple quantization config (calibration_config.proto text format, aoepar_16_077):
    ``skip_layers`` are ONNX node names, ``ifmr_quantize`` the parameters the host emulation
    searched with."""
    lines = ["# edgefuse: AMCT simple quantization config (calibration_config.proto)",
             "batch_num: 1", f"activation_offset: {str(ifmr.activation_offset).lower()}"]
    lines += [f"skip_layers: {json.dumps(name)}" for name in keep_fp16]
    lines += ["common_config: {", "  arq_quantize: {", "    channel_wise: true", "  }",
              "  ifmr_quantize: {"]
    lines += [f"    {key}: {value!r}" for key, value in ifmr.proto_fields().items()]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def compression_config_text(inputs: Sequence[CalibrationInput], infer_soc: str, *,
                            prefix: str, first_layer: bool = False) -> str:
    """``--compression_optimize_conf``'s file (atlasatcparam_16_0059); ``prefix`` is where the
    .bin files and the simple config lie relative to ATC's working directory."""
    for path in [f"{prefix}{SIMPLE_CONFIG}", *(f"{prefix}{i.file}" for i in inputs)]:
        if not _ATC_PATH_CHARACTERS.match(path):
            raise InputError(f"'{path}' holds characters ATC does not accept in a path",
                             reference=Ref.BAD_CALIBRATION_INPUTS)
    lines = ["enable_first_layer_quantization: true"] if first_layer else []
    lines += [
        "calibration:",
        "{",
        f"    input_data_dir: {','.join(prefix + i.file for i in inputs)}",
        "    input_shape: " + ";".join(f"{i.name}:{','.join(map(str, i.shape))}"
                                     for i in inputs),
        f"    config_file: {prefix}{SIMPLE_CONFIG}",
        f"    infer_soc: {infer_soc}",
        "    log: info",
        "}",
    ]
    return "\n".join(lines) + "\n"


def read_int8_calibration(folder: str | os.PathLike[str]) -> Int8Calibration:
    """The folder ``write_int8_calibration`` wrote, checked: every .bin present and of the size
    its shape says (a truncated copy would calibrate on garbage)."""
    path = Path(folder)
    record_path = path / RECORD
    if not record_path.is_file():
        raise InputError(
            f"'{path}' is not an INT8 calibration folder (no {RECORD})",
            hint="make one with: edgefuse quantize MODEL.onnx --int8 --inputs FRAMES/ -o FOLDER",
            reference=Ref.BAD_CALIBRATION_FOLDER,
        )
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if record.get("format") != RECORD_FORMAT:
            raise ValueError(f"format {record.get('format')!r}, expected {RECORD_FORMAT}")
        entries = tuple(CalibrationInput(str(i["name"]), str(i["file"]),
                                         tuple(int(d) for d in i["shape"]))
                        for i in record["inputs"])
        keep = tuple(str(n) for n in record["keep_fp16"])
        soc, samples, source = str(record["infer_soc"]), int(record["samples"]), \
            str(record["source"])
        emulated = (record.get("host_emulation") or {}).get("model")
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"'{record_path}' cannot be read: {exc}",
                         reference=Ref.BAD_CALIBRATION_FOLDER) from exc
    for entry in entries:
        file = path / entry.file
        expected = int(np.prod(entry.shape)) * 4
        size = file.stat().st_size if file.is_file() else None
        if size != expected or "/" in entry.file or not _ATC_PATH_CHARACTERS.match(entry.file):
            raise InputError(
                f"calibration file '{file}' of input '{entry.name}' is "
                + ("missing" if size is None else f"{size} bytes, not {expected} "
                   f"(float32 {entry.shape})"),
                hint="write the folder again with edgefuse quantize --int8",
                reference=Ref.BAD_CALIBRATION_FOLDER,
            )
    if not (path / SIMPLE_CONFIG).is_file():
        raise InputError(f"'{path / SIMPLE_CONFIG}' is missing",
                         reference=Ref.BAD_CALIBRATION_FOLDER)
    return Int8Calibration(path, entries, keep, soc, samples, source, emulated)


def resolve_task(model: onnx.ModelProto, task: str | None) -> str:
    """The task whose metric gates the automatic choice: ``task``, else the model's app info."""
    if task is None:
        info = model_info.from_onnx(model, "the model")
        task = None if info is None else info.task
    if task not in TASKS:
        raise InputError(
            "choosing the layers to keep FP16 automatically needs the task whose metric gates "
            + ("it" if task is None else f"it; '{task}' is not one of {', '.join(TASKS)}"),
            hint=f"pass --task {'|'.join(TASKS)} (or name the layers: --keep-fp16 LAYER ..., "
                 "or none)",
            reference=Ref.UNKNOWN_TASK)
    return task


def quantizable_layers(model: onnx.ModelProto) -> dict[str, str]:
    """Node name -> op type of the layers ATC's calibration quantizes."""
    return {node.name: node.op_type for node in model.graph.node
            if node.op_type in QUANTIZABLE_OP_TYPES and node.name}


def _keep_items(keep_fp16: str | Sequence[str]) -> list[str]:
    """``keep_fp16`` as a list (a string is comma-separated), ``none`` taken out."""
    items = keep_fp16.split(",") if isinstance(keep_fp16, str) else list(keep_fp16)
    items = [item.strip() for item in items if item.strip()]
    if "none" in items and len(items) > 1:
        raise InputError("--keep-fp16 none cannot be combined with other entries",
                         hint="use none, auto, or layer names (optionally with auto)",
                         reference=Ref.UNKNOWN_KEEP_FP16_LAYER)
    return [item for item in items if item != "none"]


def _check_keep_fp16(model: onnx.ModelProto, names: Sequence[str]) -> tuple[str, ...]:
    layers = quantizable_layers(model)
    all_nodes = {node.name: node.op_type for node in model.graph.node}
    for name in names:
        if name in layers:
            continue
        if name in all_nodes:
            raise InputError(
                f"--keep-fp16: '{name}' is a {all_nodes[name]} node, which INT8 calibration does "
                "not quantize: it stays FP16 anyway",
                hint=f"name layers of type {', '.join(sorted(QUANTIZABLE_OP_TYPES))}",
                reference=Ref.UNKNOWN_KEEP_FP16_LAYER,
            )
        close = difflib.get_close_matches(name, list(layers), n=3)
        some = list(layers)[:3]
        known = (f"did you mean {', '.join(close)}? " if close else
                 f"its {len(layers)} quantizable layers begin {', '.join(some)}; " if some else
                 "it has none; ")
        raise InputError(
            f"--keep-fp16: the model has no quantizable layer named '{name}'",
            hint=known + "names are the ONNX node names of the model quantized (after edgefuse "
            "optimize, the optimized model's; Netron shows them)",
            reference=Ref.UNKNOWN_KEEP_FP16_LAYER,
        )
    return tuple(dict.fromkeys(names))


def _stack(specs, feeds) -> dict[str, np.ndarray]:
    """One array per input, the samples concatenated on the batch axis; samples whose shapes
    differ (a dynamic input fed at two sizes) are refused: input_shape holds one shape."""
    stacked = {}
    for spec in specs:
        arrays = [sample[spec.name] for sample in feeds]
        shapes = {a.shape[1:] for a in arrays}
        if len(shapes) > 1 or arrays[0].ndim == 0:
            raise InputError(
                f"the calibration samples of input '{spec.name}' do not share one shape: "
                + ", ".join(sorted(str(s) for s in shapes)),
                hint="ATC's input_shape holds one shape per input: feed every sample at the "
                     "same size",
                reference=Ref.BAD_CALIBRATION_INPUTS,
            )
        stacked[spec.name] = np.concatenate(arrays, axis=0)
    return stacked


def _refuse_noise(stacked: dict[str, np.ndarray], inputs: FeedSource) -> None:
    """Refuse image-sized inputs whose every sample is spatially uncorrelated: noise (random
    .npz files, a corrupted video) would calibrate the activation ranges on nothing."""
    for name, array in stacked.items():
        if array.ndim != 4 or array.shape[-2] < NOISE_MIN_SIZE or array.shape[-1] < 2:
            continue
        correlations = [_neighbour_correlation(sample) for sample in array]
        if all(abs(r) < NOISE_CORRELATION for r in correlations):
            raise InputError(
                f"the calibration inputs of '{name}' from '{inputs}' look like noise: "
                f"neighbouring values are uncorrelated in every sample (|r| <= "
                f"{max(abs(r) for r in correlations):.3f}; camera frames give r > 0.6)",
                hint="calibrate on real frames: a folder of images or a video of the scene",
                reference=Ref.INT8_NEEDS_REAL_INPUTS,
            )


def _neighbour_correlation(sample: np.ndarray) -> float:
    """Pearson correlation of values with their neighbour along the second-to-last axis (a
    spatial axis in NCHW and NHWC alike); NaN for a constant sample, which is not judged."""
    first = np.moveaxis(sample, -2, 0)
    x, y = first[:-1].astype(np.float64).ravel(), first[1:].astype(np.float64).ravel()
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _check_output_folder(out: Path) -> None:
    if not out.parent.is_dir():
        raise InputError(f"the parent of '{out}' does not exist",
                         hint=f"create it first: mkdir -p {out.parent}",
                         reference=Ref.BAD_OUTPUT_PATH)
    if out.exists():
        raise InputError(f"'{out}' already exists",
                         hint="choose another -o: the calibration folder is written whole",
                         reference=Ref.BAD_OUTPUT_PATH)
