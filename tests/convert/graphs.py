"""Tiny ONNX models for the convert tests, built with onnx.helper.

Why hand-built graphs: each one isolates one property (dynamic dims, unnamed nodes, a Shape chain
to fold, an opset-specific op), and builds in microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
from onnx import TensorProto

IR_VERSION = 8


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: dict[str, np.ndarray] | None = None,
    *,
    opset: int = 13,
    extra_opsets: dict[str, int] | None = None,
) -> onnx.ModelProto:
    tensors = [onnx.numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()]
    graph = oh.make_graph(list(nodes), "g", list(inputs), list(outputs), tensors)
    opsets = [oh.make_opsetid("", opset)]
    opsets += [oh.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    return oh.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def tensor(name: str, dims: Sequence[int | str] | None, dtype: int = TensorProto.FLOAT):
    return oh.make_tensor_value_info(name, dtype, dims)


def relu(dims: Sequence[int | str] = (1, 3, 4, 4), *, opset: int = 13) -> onnx.ModelProto:
    """The smallest valid model: y = Relu(x)."""
    return model([oh.make_node("Relu", ["x"], ["y"], name="act")],
                 [tensor("x", dims)], [tensor("y", dims)], opset=opset)


def classifier(opset: int = 13) -> onnx.ModelProto:
    """Dynamic batch; named Conv/Relu/ReduceMean; an unnamed Shape->Gather->Concat->Reshape chain
    (foldable once the batch is fixed); an unnamed Constant; an unused initializer."""
    rng = np.random.default_rng(0)
    weights = {
        "conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "conv.bias": rng.standard_normal(4).astype(np.float32),
        "unused.weight": np.ones(5, np.float32),
    }
    nodes = [
        oh.make_node("Conv", ["images", "conv.weight", "conv.bias"], ["conv_out"],
                     name="backbone/conv", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["conv_out"], ["features"], name="backbone/relu"),
        oh.make_node("ReduceMean", ["features"], ["pooled4d"], name="head/pool", axes=[2, 3],
                     keepdims=1),
        oh.make_node("Shape", ["images"], ["images_shape"]),
        oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("z", TensorProto.INT64, [1],
                                                                     [0])),
        oh.make_node("Gather", ["images_shape", "zero"], ["batch"], axis=0),
        oh.make_node("Constant", [], ["minus_one"],
                     value=oh.make_tensor("m", TensorProto.INT64, [1], [-1])),
        oh.make_node("Concat", ["batch", "minus_one"], ["flat_shape"], axis=0),
        oh.make_node("Reshape", ["pooled4d", "flat_shape"], ["pooled"]),
    ]
    return model(nodes, [tensor("images", ["N", 3, 8, 8])],
                 [tensor("features", ["N", 4, 8, 8]), tensor("pooled", ["N", 4])],
                 weights, opset=opset)


def ort_run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def opset_of(proto: onnx.ModelProto) -> int:
    return next(e.version for e in proto.opset_import if e.domain in ("", "ai.onnx"))


def metadata(proto: onnx.ModelProto) -> dict[str, str]:
    return {prop.key: prop.value for prop in proto.metadata_props}
