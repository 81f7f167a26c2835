"""INT8 in the compile stage: an ``edgefuse quantize --int8`` folder -> ATC's
``--compression_optimize_conf`` in the build directory.

Why its own step: INT8 post-training quantization on Ascend happens inside ATC, which calibrates
the FP32 model on the .bin files the compression config names. The build directory must be
self-contained (compile.sh runs on another host), so the calibration files are copied into
``BUILD_DIR/int8/`` and the compression config is rewritten with paths relative to BUILD_DIR,
where ATC runs.

What CANN documents, and this module enforces (atlasatcparam_16_0059,
https://www.hiascend.com/document/detail/zh/canncommercial/latest/devaids/atctool/atlasatcparam_16_0059.html):
- calibration cannot be combined with the high-precision modes: ``--precision_mode`` force_fp32 or
  must_keep_origin_dtype ("neither the performance of quantization nor the accuracy of the
  high-precision mode"): refused (``INT8_CONFLICTING_MODES``, checked in ``AtcOptions``);
- ``enable_first_layer_quantization: true`` fuses AIPP with the Quant op before the first
  Conv2D; it can only pay off with an AIPP + Conv2D structure and ``--enable_small_channel 1``
  (same page), and small-channel optimisation helps convolutions of <= 4 input channels, with
  static AIPP (atlasatcparam_16_0055,
  https://www.hiascend.com/document/detail/zh/canncommercial/latest/devaids/atctool/atlasatcparam_16_0055.html).
  edgefuse's AIPP is static, so both are switched on exactly when the AIPP input feeds a Conv
  directly and that Conv reads <= 4 channels.
- the calibration shapes must be the model's input shapes except the batch dimension (the number
  of samples), and every ``--keep-fp16`` layer must still exist in the prepared model (ATC names
  layers by their ONNX node names).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from edgefuse.errors import InputError, Ref
from edgefuse.quantize.int8 import (
    SIMPLE_CONFIG,
    Int8Calibration,
    compression_config_text,
    quantizable_layers,
)

INT8_DIR = "int8"
COMPRESSION_FILE = "compression_optimize.cfg"
SMALL_CHANNEL_LIMIT = 4


@dataclasses.dataclass(frozen=True)
class Int8Plan:
    calibration: Int8Calibration
    first_layer: bool  # enable_first_layer_quantization + --enable_small_channel=1

    def to_json(self) -> dict:
        return {
            # the copy compile.sh reads, in BUILD_DIR: not the folder it came from, whose path
            # is the build host's (a bundle's manifest names no build-host path)
            "calibration": f"{INT8_DIR}/",
            "samples": self.calibration.samples,
            "keep_fp16": list(self.calibration.keep_fp16),
            "infer_soc": self.calibration.infer_soc,
            "first_layer_quantization": self.first_layer,
            "config": COMPRESSION_FILE,
        }


def plan_int8(calibration: Int8Calibration, model: onnx.ModelProto,
              input_shape: Mapping[str, Sequence[int]], soc: str,
              aipp_input: str | None) -> Int8Plan:
    """Check ``calibration`` against the prepared ``model`` and decide the first-layer fusion."""
    if calibration.infer_soc != soc:
        raise InputError(
            f"the calibration folder was made for {calibration.infer_soc}, the build is for {soc}",
            hint=f"write it again with: edgefuse quantize ... --int8 --soc {soc}",
            reference=Ref.BAD_CALIBRATION_FOLDER,
        )
    given = {entry.name: entry for entry in calibration.inputs}
    if set(given) != set(input_shape):
        raise InputError(
            f"the calibration folder feeds inputs {sorted(given)}, the model takes "
            f"{sorted(input_shape)}",
            hint="write the folder from this model: edgefuse quantize MODEL --int8 ...",
            reference=Ref.BAD_CALIBRATION_FOLDER,
        )
    for name, dims in input_shape.items():
        shape = given[name].shape
        if len(shape) != len(dims) or any(
                d not in (-1, s) for d, s in zip(dims[1:], shape[1:], strict=True)):
            raise InputError(
                f"calibration data of input '{name}' is {list(shape)}, the model's input is "
                f"{list(dims)} (only the batch dimension may differ)",
                hint="write the folder again from the model you compile",
                reference=Ref.BAD_CALIBRATION_FOLDER,
            )
    layers = quantizable_layers(model)
    missing = [name for name in calibration.keep_fp16 if name not in layers]
    if missing:
        raise InputError(
            f"layers to keep FP16 are not quantizable layers of the prepared model: "
            f"{', '.join(missing)}",
            hint="name the nodes of the model you compile (compile prepares it unchanged in "
                 "names; a different model file has different names)",
            reference=Ref.UNKNOWN_KEEP_FP16_LAYER,
        )
    return Int8Plan(calibration, aipp_input is not None
                    and _first_conv_reads_few_channels(model, aipp_input))


def stage_int8(plan: Int8Plan, staging: Path) -> list[str]:
    """Copy the calibration files into ``staging/int8/`` and write the compression config;
    the files written, relative to ``staging``."""
    target = staging / INT8_DIR
    target.mkdir()
    source = plan.calibration.folder
    written = []
    for file in [*(entry.file for entry in plan.calibration.inputs), SIMPLE_CONFIG]:
        shutil.copyfile(source / file, target / file)
        written.append(f"{INT8_DIR}/{file}")
    text = compression_config_text(plan.calibration.inputs, plan.calibration.infer_soc,
                                   prefix=f"./{INT8_DIR}/", first_layer=plan.first_layer)
    (staging / COMPRESSION_FILE).write_text(text, encoding="utf-8")
    return [COMPRESSION_FILE, *written]


def _first_conv_reads_few_channels(model: onnx.ModelProto, input_name: str) -> bool:
    readers = [node for node in model.graph.node if input_name in node.input]
    if len(readers) != 1 or readers[0].op_type != "Conv":
        return False
    weights = {init.name: init for init in model.graph.initializer}
    weight = weights.get(readers[0].input[1])
    return weight is not None and len(weight.dims) == 4 and weight.dims[1] <= SMALL_CHANNEL_LIMIT
