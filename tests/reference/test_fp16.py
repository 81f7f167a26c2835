"""FP16-storage emulation: exact against numpy's step-by-step rounding, and why it is needed."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.quantize.fp16 import convert_fp16
from edgefuse.reference.fp16 import (
    fp16_storage_model,
    has_fp16,
    run_fp16_storage,
)
from edgefuse.reference.onnx_runner import run_onnx, with_outputs
from tests.quantize.graphs import conv_net, feeds, make_model, node

pytestmark = pytest.mark.ort

LEVELS = [
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
]


def _chain() -> onnx.ModelProto:
    """y = sigmoid((x * 1.5) - 2048) * 4096: every step rounds differently in FP16."""
    nodes = [
        node("Mul", ["x", "k"], ["a"], name="mul"),
        node("Sub", ["a", "c"], ["b"], name="sub"),
        node("Sigmoid", ["b"], ["s"], name="sigmoid"),
        node("Mul", ["s", "big"], ["y"], name="scale"),
    ]
    weights = {"k": np.array(1.5, np.float32), "c": np.array(2048.0, np.float32),
               "big": np.array(4096.0, np.float32)}
    return make_model(nodes, {"x": [5]}, {"y": [5]}, weights)


def _numpy_fp16_chain(x: np.ndarray) -> np.ndarray:
    def f16(v):
        return np.asarray(v, np.float32).astype(np.float16).astype(np.float32)

    a = f16(f16(x) * np.float32(1.5))
    b = f16(a - np.float32(2048.0))
    s = f16(1.0 / (1.0 + np.exp(-b.astype(np.float64))))
    return f16(s * np.float32(4096.0))


X = np.array([1366.0, 1365.3, 1400.77, 1370.1, 1000.0], np.float32)


def _session(model: onnx.ModelProto, level) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("level", LEVELS)
def test_ort_executes_explicit_cast_pairs_at_every_optimization_level(level):
    emulated = fp16_storage_model(_chain())
    got = _session(emulated, level).run(None, {"x": X})[0]
    np.testing.assert_array_equal(got, _numpy_fp16_chain(X))


def test_ort_running_an_fp16_graph_skips_intermediate_rounding():
    # The reason emulate exists: 1366 * 1.5 = 2049 is 2048 in FP16, so (x*1.5) - 2048 must be 0;
    # ONNX Runtime's CPU provider computes Mul and Sub in FP32 back to back and returns 1.
    model = ir.serde.deserialize_model(_chain())
    convert_fp16(model, set(), keep_io_types=False)
    fp16 = ir.serde.serialize_model(model)
    nodes = [node("Mul", ["x", "k"], ["a"]), node("Sub", ["a", "c"], ["y"])]
    graph = onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1])],
        [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1])],
        [numpy_helper.from_array(np.array(1.5, np.float16), "k"),
         numpy_helper.from_array(np.array(2048, np.float16), "c")])
    plain = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)],
                                   ir_version=8)
    x16 = np.array([1366.0], np.float16)
    assert _session(plain, LEVELS[0]).run(None, {"x": x16})[0][0] == 1.0
    assert run_fp16_storage(plain, {"x": x16})["y"][0] == 0.0
    assert has_fp16(fp16) and not has_fp16(_chain())


def test_fp32_model_emulation_matches_numpy_step_by_step():
    got = run_fp16_storage(_chain(), {"x": X})["y"]
    np.testing.assert_array_equal(got, _numpy_fp16_chain(X))
    plain = run_onnx(_chain(), {"x": X})["y"]
    assert not np.array_equal(plain, got)  # the rounding is visible


def test_converted_fp16_model_emulation_matches_numpy_step_by_step():
    model = ir.serde.deserialize_model(_chain())
    convert_fp16(model, set(), keep_io_types=True)
    got = run_fp16_storage(ir.serde.serialize_model(model), {"x": X})["y"]
    np.testing.assert_array_equal(got, _numpy_fp16_chain(X))


def test_emulation_keeps_tensor_names_readable():
    emulated = with_outputs(fp16_storage_model(_chain()), ["a", "b"])
    out = run_onnx(emulated, {"x": X})
    f16 = X.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out["a"], (f16 * 1.5).astype(np.float16).astype(np.float32))


def test_kept_node_computes_fp32_and_its_fp16_readers_read_it_rounded():
    model = conv_net()
    inputs = feeds(model)
    by_emulation = run_fp16_storage(model, inputs, keep_fp32={"conv2"})["y"]
    converted = ir.serde.deserialize_model(model)
    convert_fp16(converted, {"conv2"}, keep_io_types=False)
    by_conversion = run_fp16_storage(ir.serde.serialize_model(converted), inputs)["y"]
    np.testing.assert_array_equal(by_emulation.astype(np.float32),
                                  by_conversion.astype(np.float32))
    everything = run_fp16_storage(model, inputs)["y"]
    assert not np.array_equal(everything, by_emulation)
