"""Per-layer comparison: accumulated and isolated errors against numpy, matching through rewrites,
the first break, JSON, plot and CLI."""

import json

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.cli.main import main
from edgefuse.optimize import optimize
from edgefuse.quantize import quantize
from edgefuse.reference.compare import compare_arrays
from edgefuse.verify import verify
from edgefuse.verify.layers import compare_layers
from tests.needs import optional

pytestmark = pytest.mark.ort


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [oh.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in weights.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _chain() -> onnx.ModelProto:
    nodes = [oh.make_node("Mul", ["x", "k"], ["a"], name="mul"),
             oh.make_node("Sub", ["a", "c"], ["b"], name="sub"),
             oh.make_node("Sigmoid", ["b"], ["y"], name="sigmoid")]
    weights = {"k": np.array(1.5, np.float32), "c": np.array(2048.0, np.float32)}
    return _model(nodes, {"x": [6]}, {"y": [6]}, weights)


def _f16(v) -> np.ndarray:
    return np.asarray(v, np.float32).astype(np.float16).astype(np.float64)


def _overflowing() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["r"], name="relu"),
             oh.make_node("Mul", ["r", "k"], ["y"], name="shrink")]
    weights = {"w": (rng.standard_normal((4, 3, 3, 3)) * 3e4).astype(np.float32),
               "k": np.array(1e-5, np.float32)}
    return _model(nodes, {"x": [1, 3, 6, 6]}, {"y": [1, 4, 6, 6]}, weights)


X = np.array([1366.0, 1365.3, 1366.9, 1370.1, 1362.2, 1365.9], np.float32)


def test_accumulated_and_isolated_errors_match_numpy():
    report = compare_layers(_chain(), _chain(), {"x": X}, emulate_fp16=True)
    rows = {r.tensor: r for r in report.rows}
    a_ref = X * np.float32(1.5)
    b_ref = (X * np.float32(1.5)).astype(np.float32) - np.float32(2048)
    # accumulated: FP16 all the way from the input
    a_acc = _f16(_f16(X) * 1.5)
    b_acc = _f16(a_acc - 2048)
    # isolated: 'sub' fed the reference 'a' (rounded to FP16, as an FP16 layer reads it)
    b_iso = _f16(_f16(X * np.float32(1.5)) - 2048)
    for name, ref, got in [("a", a_ref, a_acc), ("b", b_ref, b_acc)]:
        expected = compare_arrays(ref, got)
        assert rows[name].accumulated.rel_l2_error == pytest.approx(expected[2], rel=1e-6)
        assert rows[name].accumulated.max_abs_error == pytest.approx(expected[1], rel=1e-6)
    expected_iso = compare_arrays(b_ref, b_iso)
    assert rows["b"].isolated.rel_l2_error == pytest.approx(expected_iso[2], rel=1e-6)
    assert [r.tensor for r in report.rows] == ["a", "b", "y"]
    assert rows["b"].op_type == "Sub" and rows["b"].node == "sub"


def test_first_break_and_overflow_are_marked():
    model = _overflowing()
    inputs = {"x": np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    report = compare_layers(model, model, inputs, emulate_fp16=True)
    first = report.first_break
    assert first is not None and first.tensor == "c" and first.op_type == "Conv"
    rows = {r.tensor: r for r in report.rows}
    assert {"worst", "exceeds-fp16", "non-finite", "breaks"} <= set(rows["c"].flags)
    assert "first break: c (Conv 'conv')" in report.render()


def test_tensors_match_by_name_through_optimize_folds():
    rng = np.random.default_rng(0)
    nodes = [oh.make_node("Conv", ["x", "w"], ["conv_out"], name="conv"),
             oh.make_node("BatchNormalization", ["conv_out", "g", "b", "m", "v"], ["bn_out"],
                          name="bn"),
             oh.make_node("Relu", ["bn_out"], ["y"], name="relu")]
    weights = {"w": rng.standard_normal((4, 3, 1, 1)).astype(np.float32),
               "g": np.full(4, 2.0, np.float32), "b": np.full(4, 0.1, np.float32),
               "m": np.full(4, 0.2, np.float32), "v": np.full(4, 4.0, np.float32)}
    model = _model(nodes, {"x": [1, 3, 4, 4]}, {"y": [1, 4, 4, 4]}, weights)
    fused = optimize(model).model
    assert [n.op_type for n in fused.graph.node] == ["Conv", "Relu"]
    inputs = {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}
    report = compare_layers(model, fused, inputs)
    assert [(r.tensor, r.op_type) for r in report.rows] == [("bn_out", "Conv"), ("y", "Relu")]
    assert min(r.accumulated.cosine for r in report.rows) > 0.99999
    assert not report.emulated_fp16


def test_quantized_candidate_rows_skip_casts_and_isolate_fully():
    rng = np.random.default_rng(0)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             oh.make_node("Exp", ["c"], ["e"], name="exp"),  # kept FP32 by the policy
             oh.make_node("Mul", ["e", "k"], ["y"], name="scale")]
    weights = {"w": (rng.standard_normal((2, 3, 1, 1)) * 0.3).astype(np.float32),
               "k": np.array(0.5, np.float32)}
    model = _model(nodes, {"x": [1, 3, 4, 4]}, {"y": [1, 2, 4, 4]}, weights)
    quantized = quantize(model, keep_io_types=True).model
    inputs = {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}
    report = compare_layers(model, quantized, inputs)
    assert report.emulated_fp16
    assert [(r.tensor, r.op_type) for r in report.rows] == [("c", "Conv"), ("e", "Exp"),
                                                            ("y", "Mul")]
    assert not any(r.partial for r in report.rows)
    exp_row = report.rows[1]
    # isolated Exp runs in FP32 on the reference 'c': exact up to ORT's float32 exp
    assert exp_row.isolated.rel_l2_error < 1e-6 < exp_row.accumulated.rel_l2_error


def test_cli_per_layer_writes_json_and_plot(tmp_path, capsys):
    optional("matplotlib")
    source = tmp_path / "m.onnx"
    onnx.save(_overflowing(), source)
    report_json, plot = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["verify", str(source), str(source), "--emulate-fp16", "--per-layer",
                 "--json", str(report_json), "--plot", str(plot)])
    assert code == 1
    out = capsys.readouterr().out
    assert "first break: c" in out
    data = json.loads(report_json.read_text())
    assert data["layers"]["first_break"] == "c"
    assert {"accumulated", "isolated"} <= set(data["layers"]["layers"][0])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verify_emulates_fp16_candidates_by_default():
    quantized = quantize(_chain(), keep_io_types=True).model
    emulated = verify(_chain(), quantized, inputs={"x": X})
    plain = verify(_chain(), quantized, inputs={"x": X}, emulate_fp16=False)
    assert emulated.emulated_fp16 and emulated.min_cosine == 0.999
    assert emulated.outputs[0].max_abs_error > plain.outputs[0].max_abs_error


def test_per_layer_verify_infers_the_candidates_shapes_once(monkeypatch):
    reference = _chain()
    candidate = quantize(reference, keep_fp32="none").model
    candidate.graph.name = "candidate"
    inferred = []
    real = onnx.shape_inference.infer_shapes

    def counting(model, *args, **kwargs):
        inferred.append(model.graph.name)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting)
    result = verify(reference, candidate, per_layer=True)
    assert result.layers is not None and result.layers.rows
    assert inferred.count("candidate") == 1
