"""Tiny FP32 graphs for the quantize tests, among them models built to break FP16, and the
independent references they are judged by (numpy, ONNX Runtime, naive FP16 converters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

from edgefuse.reference.compare import compare_arrays
from edgefuse.reference.fp16 import fp16_storage_model
from edgefuse.reference.onnx_runner import run_onnx

OPSET = 17
node = oh.make_node


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int]],
    outputs: Mapping[str, Sequence[int]],
    initializers: Mapping[str, np.ndarray] = (),
    *,
    opset: int = OPSET,
) -> onnx.ModelProto:
    """A checked FP32 model; inputs and outputs are float32 with the given static shapes."""
    graph = oh.make_graph(
        list(nodes),
        "test",
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def feeds(model: onnx.ModelProto, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        v.name: (scale * rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]))
        .astype(np.float32)
        for v in model.graph.input
    }


def conv_net(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> GlobalAveragePool -> Flatten: every op FP16-safe."""
    rng = np.random.default_rng(seed)
    weights = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32),
    }
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"], name="relu1"),
        node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
        node("Flatten", ["g"], ["y"], name="flatten"),
    ]
    return make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 4]}, weights)


def bn_huge_variance() -> onnx.ModelProto:
    """BatchNorm on the input with running variances up to 1e7 (FP16 max: 65504).

    A naive FP16 cast turns those variances into inf (or clamps them to 65504), which zeroes or
    rescales some channels but not others.
    """
    rng = np.random.default_rng(1)
    weights = {
        "gamma": np.array([1.0, 0.5, 2.0, 1.5], np.float32),
        "beta": np.array([0.1, -0.2, 0.3, 0.0], np.float32),
        "mean": np.array([1000.0, 0.5, -2000.0, 0.0], np.float32),
        "var": np.array([1e7, 1.0, 4e6, 0.5], np.float32),
        "w": (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32),
    }
    nodes = [
        node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
        node("Relu", ["bn"], ["r"], name="relu"),
        node("Conv", ["r", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
    ]
    return make_model(nodes, {"x": [1, 4, 8, 8]}, {"y": [1, 4, 8, 8]}, weights)


def bn_huge_variance_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs at the scale the BatchNorm statistics describe (channel 0: mean 1e3, std 3e3)."""
    rng = np.random.default_rng(seed)
    scale = np.array([3000.0, 1.0, 2000.0, 0.7], np.float32).reshape(1, 4, 1, 1)
    shift = np.array([1000.0, 0.5, -2000.0, 0.0], np.float32).reshape(1, 4, 1, 1)
    return {"x": (rng.standard_normal((1, 4, 8, 8)) * scale + shift).astype(np.float32)}


def activation_overflow() -> onnx.ModelProto:
    """A Conv whose output reaches ~1e5, normalised by its own maximum: y = c / max|c|.

    In FP16 the Conv output overflows to inf, and inf / inf is NaN.
    """
    rng = np.random.default_rng(2)
    weights = {"w": (rng.standard_normal((4, 3, 3, 3)) * 3e4).astype(np.float32)}
    nodes = [
        node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        node("Abs", ["c"], ["a"], name="abs"),
        node("ReduceMax", ["a"], ["m"], name="max", keepdims=1),
        node("Div", ["c", "m"], ["y"], name="normalize"),
    ]
    return make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]}, weights)


def large_reduction() -> onnx.ModelProto:
    """Sum of 262144 ReLU activations (~1e5, past FP16's 65504), scaled back by 1e-3."""
    nodes = [
        node("Relu", ["x"], ["r"], name="relu"),
        node("ReduceSum", ["r", "axes"], ["s"], name="sum", keepdims=1),
        node("Mul", ["s", "k"], ["y"], name="scale"),
    ]
    weights = {"axes": np.array([1, 2, 3], np.int64), "k": np.array(1e-3, np.float32)}
    return make_model(nodes, {"x": [2, 64, 64, 64]}, {"y": [2, 1, 1, 1]}, weights)


def cancellation() -> onnx.ModelProto:
    """y = ((relu(conv(x)) + 1024) - 1024) * 2 + t: FP16 loses every fractional bit at the +1024.

    FP16 values in [1024, 2048) are whole numbers, so stored in FP16 the +1024 rounds
    relu(conv(x)), of order 1, to an integer: an error of up to 0.5, doubled to 1 in y, three
    orders of magnitude above what storing y itself in FP16 costs (tests/quantize/
    test_breaking_models.py checks both). No policy rule and no overflow applies; only the search
    can find that 'add_big' and 'sub_big' must stay FP32.
    """
    rng = np.random.default_rng(3)
    weights = {
        "w": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32),
        "big": np.array(1024.0, np.float32),
        "two": np.array(2.0, np.float32),
        "t": (rng.standard_normal((1, 4, 8, 8))).astype(np.float32),
    }
    nodes = [
        node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        node("Relu", ["c"], ["r"], name="relu"),
        node("Add", ["r", "big"], ["shifted"], name="add_big"),
        node("Sub", ["shifted", "big"], ["back"], name="sub_big"),
        node("Mul", ["back", "two"], ["m"], name="double"),
        node("Add", ["m", "t"], ["y"], name="offset"),
    ]
    return make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]}, weights)


def cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    value = compare_arrays(reference, candidate)[0]
    return value if np.isfinite(value) else -1.0


def force_fp16_outputs(model: onnx.ModelProto, inputs) -> dict[str, np.ndarray]:
    """The naive cast ATC does by default: every tensor FP16, nothing kept (emulated)."""
    emulated = fp16_storage_model(model)
    return run_onnx(emulated, inputs)


def ort_float16_outputs(model: onnx.ModelProto, inputs) -> dict[str, np.ndarray]:
    """The common tool: onnxruntime.transformers.float16 (clamps constants to +-65504), emulated."""
    import warnings

    from onnxruntime.transformers.float16 import convert_float_to_float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = convert_float_to_float16(model, keep_io_types=True)
    return run_onnx(fp16_storage_model(converted), inputs)
