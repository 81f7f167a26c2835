"""A host emulation of the board's INT8: the FP32 model with QuantizeLinear/DequantizeLinear
pairs (QDQ) placed as ATC's calibration quantizes, for ONNX Runtime and ``verify --per-layer``.

Why QDQ on ONNX Runtime: the board's INT8 model exists only inside ATC's output; to see what INT8
costs before a board, the same rounding has to happen on the host. ONNX Runtime's
``quantize_static`` inserts QDQ pairs from a calibration run; QDQ keeps the FP32 model's tensor
names (each quantized op still writes its float output), so ``verify MODEL EMULATED --per-layer``
compares layer by layer as it does for FP16.

The scheme follows what the simple quantization config edgefuse writes asks of CANN (aoepar_16_077,
https://www.hiascend.com/document/detail/zh/canncommercial/latest/devaids/aoe/aoepar_16_077.html):
weights INT8, symmetric, one scale per output channel (ARQ, ``channel_wise: true``); activations
INT8 per tensor with an offset (``activation_offset: true``), emulated as uint8 with a zero point;
only Conv, ConvTranspose, Gemm and MatMul quantized, the ``--keep-fp16`` layers excluded.
What differs: CANN searches each activation's clipping range (IFMR); this emulation takes the
calibration min/max. Its numbers are predictions until a board confirms them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnxruntime import quantization

from edgefuse._quiet import quiet_logger

EMULATED_MODEL = "host_int8.qdq.onnx"


def emulate_int8(model: onnx.ModelProto, samples: Sequence[dict[str, np.ndarray]], *,
                 op_types: Collection[str], keep_fp16: Sequence[str] = ()) -> onnx.ModelProto:
    """The QDQ model of ``model`` calibrated on ``samples`` (one feed mapping per sample), the
    nodes of ``op_types`` quantized except ``keep_fp16``."""
    with tempfile.TemporaryDirectory(prefix="edgefuse-int8-") as folder:
        source, target = Path(folder) / "fp32.onnx", Path(folder) / "qdq.onnx"
        onnx.save(model, source)
        # quantize_static logs on the root logger that the model could be "pre-processed"
        # (its own shape inference): a note about its internals, nothing the user can act on.
        with quiet_logger("root"):
            _quantize_static(source, target, samples, op_types, keep_fp16)
        return onnx.load(target)


def _quantize_static(source: Path, target: Path, samples: Sequence[dict[str, np.ndarray]],
                     op_types: Collection[str], keep_fp16: Sequence[str]) -> None:
    quantization.quantize_static(
        str(source), str(target), _Samples(samples),
        quant_format=quantization.QuantFormat.QDQ,
        op_types_to_quantize=sorted(op_types),
        nodes_to_exclude=list(keep_fp16),
        per_channel=True,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
        calibrate_method=quantization.CalibrationMethod.MinMax,
        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
    )


class _Samples(quantization.CalibrationDataReader):
    """The calibration samples, one feed mapping at a time, as quantize_static reads them."""

    def __init__(self, samples: Sequence[dict[str, np.ndarray]]) -> None:
        self._samples: Iterator[dict[str, np.ndarray]] = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._samples, None)
