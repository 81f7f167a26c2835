"""profile --precision int8: the quantized layers' floor at the INT8 peak (8 TOPS on the 310B4),
the layers kept FP16 and every other row at the FP16 peak (4 TFLOPS); figures computed by hand."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.profile.run import profile

pytestmark = pytest.mark.ort

# Each Conv: 64 -> 64 channels, 3x3, pad 1, on 56x56, no bias: 64*56*56 = 200704 outputs x
# 64*9 = 576 MACs = 231,211,008 FLOPs; 28.90 us at 8 TOPS, 57.80 us at 4 TFLOPS. Its bytes at
# one byte per value (input 200704, weights 36864, output 200704 = 438272 B) take 17.12 us at
# 25.6 GB/s: both convs are compute-bound, so the peak decides the floor.
CONV_FLOPS = 2 * 64 * 56 * 56 * 64 * 9
RELU_FLOPS = 64 * 56 * 56


def _two_convs() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(
        (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), n) for n in "ab"]
    nodes = [oh.make_node("Conv", ["x", "a"], ["c"], name="conv_a", pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["r"], name="relu"),
             oh.make_node("Conv", ["r", "b"], ["y"], name="conv_b", pads=[1, 1, 1, 1])]
    graph = oh.make_graph(nodes, "two_convs",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])],
                          weights)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _row(report, node):
    (row,) = [row for row in report.rows if node in row.origins]
    return row


def test_a_layer_kept_fp16_gets_the_fp16_peak_and_the_quantized_one_the_int8_peak():
    report = profile(_two_convs(), "cpu", runs=1, warmup=0, soc="Ascend310B4",
                     precision="int8", keep_fp16=["conv_b"])
    quantized, kept = _row(report, "conv_a"), _row(report, "conv_b")
    assert quantized.flops in (CONV_FLOPS, CONV_FLOPS + RELU_FLOPS)  # Relu fused or not
    assert quantized.floor_us == pytest.approx(quantized.flops / 8e12 * 1e6)
    assert kept.flops == CONV_FLOPS
    assert kept.floor_us == pytest.approx(57.802752)  # 231,211,008 / 4e12 s
    assert not kept.memory_bound and not quantized.memory_bound
    assert any("kept FP16: conv_b" in note for note in report.soc_notes)


def test_without_a_keep_list_every_conv_gets_the_int8_peak():
    report = profile(_two_convs(), "cpu", runs=1, warmup=0, soc="Ascend310B4",
                     precision="int8")
    assert _row(report, "conv_b").floor_us == pytest.approx(28.901376)  # / 8e12 s


def test_an_unknown_or_non_quantizable_layer_is_refused():
    with pytest.raises(InputError, match="not a Conv/ConvTranspose/Gemm/MatMul node.*relu"):
        profile(_two_convs(), "cpu", runs=1, warmup=0, soc="Ascend310B4", precision="int8",
                keep_fp16=["relu"])


def test_keep_fp16_without_int8_is_refused(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_two_convs(), path)
    assert main(["profile", str(path), "--soc", "Ascend310B4", "--keep-fp16", "conv_b"]) == 2
    assert "only mean something under --precision int8" in capsys.readouterr().err
