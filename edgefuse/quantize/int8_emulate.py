"""A host emulation of the board's INT8: the FP32 model with QuantizeLinear/DequantizeLinear
pairs (QDQ) placed as ATC's calibration quantizes, for ONNX Runtime and ``verify --per-layer``.

Why QDQ on ONNX Runtime: the board's INT8 model exists only inside ATC's output; to see what INT8
costs before a board, the same rounding has to happen on the host. ONNX Runtime's
``quantize_static`` inserts the QDQ pairs; QDQ keeps the FP32 model's tensor names (each quantized
op still writes its float output), so ``verify MODEL EMULATED --per-layer`` compares layer by
layer as it does for FP16.

The scheme is the one the simple quantization config edgefuse writes asks of CANN (aoepar_16_077,
https://www.hiascend.com/document/detail/zh/canncommercial/latest/devaids/aoe/aoepar_16_077.html;
AMCT's simplified PTQ config, atlasamct_16_0131,
https://www.hiascend.com/document/detail/en/canncommercial/850/devaids/amct/atlasamct_16_0131.html):
- weights INT8, symmetric, one scale per output channel, ``max|w_c| / 127`` (ARQ with
  ``channel_wise: true``, atlasamct_16_0387,
  https://www.hiascend.com/document/detail/en/canncommercial/850/devaids/amct/atlasamct_16_0387.html);
- activations INT8 per tensor with an offset (``activation_offset: true``; emulated as uint8 with
  zero point ``offset + 128``, the same grid), their scale and offset from the IFMR search over
  the calibration data (``edgefuse.quantize.ifmr``, the same ``IfmrConfig`` the config file gets);
- only the *inputs* of Conv, ConvTranspose, Gemm and MatMul are quantized (and the bias, INT32 at
  input scale x weight scale): their outputs stay float, as the board's dequantization after each
  quantized layer returns FP16;
- the ``--keep-fp16`` layers read their float inputs and weights.
What still differs: the layers left unquantized run FP32 here, FP16 on the board. The numbers are
predictions until a board confirms them.

``Int8Emulation`` quantizes every quantizable layer once and leaves layers float by rewiring them
to their float inputs, so the automatic choice of layers to keep FP16 (``int8_mixed``) tries many
keep sets without calibrating again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnxruntime import quantization

from edgefuse._quiet import quiet_logger
from edgefuse.quantize.ifmr import CANN_DEFAULTS, ActivationQuant, ActivationSketch, IfmrConfig
from edgefuse.reference.onnx_runner import run_onnx, with_outputs

EMULATED_MODEL = "host_int8.qdq.onnx"


class Int8Emulation:
    """``model`` with every quantizable layer of ``op_types`` quantized, calibrated once on
    ``samples`` (one feed mapping per sample) with IFMR; ``model_keeping`` leaves layers float."""

    def __init__(self, model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]], *,
                 op_types: Collection[str], config: IfmrConfig = CANN_DEFAULTS) -> None:
        self.fp32 = model
        self.config = config
        self.layers = tuple(node.name for node in model.graph.node
                            if node.op_type in op_types and node.name)
        self.ranges = _activation_ranges(model, samples, self.layers, config)
        self.quantized = _float_for_the_rest(
            _quantize_static(model, samples, sorted(op_types), self.ranges, config), self.layers)

    def model_keeping(self, keep_fp16: Collection[str] = ()) -> onnx.ModelProto:
        """The QDQ model with the ``keep_fp16`` layers reading their float inputs, weights and
        bias (their now unused QDQ nodes and quantized initializers removed)."""
        result = onnx.ModelProto()
        result.CopyFrom(self.quantized)
        if not keep_fp16:
            return result
        originals = {node.name: node for node in self.fp32.graph.node}
        floats = {init.name: init for init in self.fp32.graph.initializer}
        present = {init.name for init in result.graph.initializer}
        produced = {out for node in result.graph.node for out in node.output}
        for node in result.graph.node:
            if node.name not in keep_fp16:
                continue
            del node.input[:]
            for name in originals[node.name].input:
                if name in floats and name not in present:
                    # A bias's DequantizeLinear writes the bias's own name: the float copy
                    # gets a name of its own so the graph defines each name once.
                    restored = f"{name}.float" if name in produced else name
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(floats[name])
                    tensor.name = restored
                    result.graph.initializer.append(tensor)
                    present.add(restored)
                    name = restored
                elif f"{name}.float" in present:
                    name = f"{name}.float"
                node.input.append(name)
        _drop_unused(result.graph)
        return result


def _activation_ranges(model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]],
                       layers: Collection[str], config: IfmrConfig) -> dict[str, ActivationQuant]:
    """IFMR over every calibration value of each tensor a quantized layer reads as an activation
    (not a weight or a bias: those are constants), gathered sample by sample."""
    constants = {init.name for init in model.graph.initializer}
    constants |= {out for node in model.graph.node if node.op_type == "Constant"
                  for out in node.output}
    names = list(dict.fromkeys(
        name for node in model.graph.node if node.name in layers
        for slot, name in enumerate(node.input)
        if name and name not in constants and slot < 2))
    exposed = with_outputs(model, [n for n in names if n not in samples[0]])
    sketches: dict[str, ActivationSketch] = {}
    for sample in samples:
        outputs = run_onnx(exposed, sample)
        for name in names:
            values = sample[name] if name in sample else outputs[name]
            if name not in sketches:
                sketches[name] = ActivationSketch(np.size(values) * len(samples), config)
            sketches[name].add(values)
    return {name: sketch.search() for name, sketch in sketches.items()}


def _quantize_static(model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]],
                     op_types: list[str], ranges: Mapping[str, ActivationQuant],
                     config: IfmrConfig) -> onnx.ModelProto:
    asymmetric = config.activation_offset
    shift, zero_type = (128, np.uint8) if asymmetric else (0, np.int8)
    overrides = {name: [{"scale": np.array(quant.scale, np.float32),
                         "zero_point": np.array(quant.offset + shift, zero_type)}]
                 for name, quant in ranges.items()}
    with tempfile.TemporaryDirectory(prefix="edgefuse-int8-") as folder:
        source, target = Path(folder) / "fp32.onnx", Path(folder) / "qdq.onnx"
        onnx.save(model, source)
        # quantize_static logs on the root logger that the model could be "pre-processed"
        # (its own shape inference): a note about its internals, nothing the user can act on.
        with quiet_logger("root"):
            quantization.quantize_static(
                str(source), str(target), _Samples(samples),
                quant_format=quantization.QuantFormat.QDQ,
                op_types_to_quantize=op_types,
                per_channel=True,
                activation_type=quantization.QuantType.QUInt8 if asymmetric
                else quantization.QuantType.QInt8,
                weight_type=quantization.QuantType.QInt8,
                calibrate_method=quantization.CalibrationMethod.MinMax,
                extra_options={"WeightSymmetric": True, "ActivationSymmetric": not asymmetric,
                               "OpTypesToExcludeOutputQuantization": op_types,
                               "QDQKeepRemovableActivations": True,
                               "TensorQuantOverrides": overrides},
            )
        return onnx.load(target)


def _float_for_the_rest(model: onnx.ModelProto, layers: Collection[str]) -> onnx.ModelProto:
    """Give every node other than the quantized layers the float tensor instead of its QDQ copy.

    ONNX Runtime shares one QDQ pair among all readers of a quantized activation, so a residual
    Add or a ReduceMean reading a Conv's input would compute on INT8-rounded values; on the board
    only the quantized layer reads the quantized tensor (AMCT's quant op feeds that layer), the
    rest read FP16."""
    producers = {out: node for node in model.graph.node for out in node.output}
    float_of = {}
    for node in model.graph.node:
        source = producers.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if source is not None and source.op_type == "QuantizeLinear":
            float_of[node.output[0]] = source.input[0]
    for node in model.graph.node:
        if node.name in layers or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for slot, name in enumerate(node.input):
            if name in float_of:
                node.input[slot] = float_of[name]
    _drop_unused(model.graph)
    return model


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove nodes whose outputs nothing reads and initializers no node reads, until none."""
    outputs = {o.name for o in graph.output}
    while True:
        read = outputs | {name for node in graph.node for name in node.input}
        dead = [node for node in graph.node if not any(o in read for o in node.output)]
        for node in dead:
            graph.node.remove(node)
        if not dead:
            break
    read = {name for node in graph.node for name in node.input} | outputs
    for init in [i for i in graph.initializer if i.name not in read]:
        graph.initializer.remove(init)


class _Samples(quantization.CalibrationDataReader):
    """The calibration samples, one feed mapping at a time, as quantize_static reads them."""

    def __init__(self, samples: Sequence[Mapping[str, np.ndarray]]) -> None:
        self._samples: Iterator[Mapping[str, np.ndarray]] = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        sample = next(self._samples, None)
        return None if sample is None else dict(sample)
