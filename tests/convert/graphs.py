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


def dynamo_view(opset: int = 18) -> onnx.ModelProto:
    """``conv(x).view(x.size(0), 6, -1)`` as ``torch.onnx.export(dynamo=True)`` spells it with a
    dynamic batch, before any folding: Constant nodes, the batch as
    ``Reshape(Squeeze(Shape(x, end=1)), [-1])`` and a Reshape with ``allowzero=1``."""
    weight = np.random.default_rng(0).standard_normal((6, 3, 1, 1)).astype(np.float32)
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        oh.make_node("Shape", ["x"], ["x_shape"], name="shape", start=0, end=1),
        oh.make_node("Squeeze", ["x_shape"], ["sym_size"], name="squeeze"),
        oh.make_node("Constant", [], ["minus_one"], name="c_minus_one", value_ints=[-1]),
        oh.make_node("Reshape", ["sym_size", "minus_one"], ["batch"], name="unsqueeze",
                     allowzero=0),
        oh.make_node("Constant", [], ["six"], name="c_six", value_ints=[6]),
        oh.make_node("Concat", ["batch", "six", "minus_one"], ["view_shape"], name="concat",
                     axis=0),
        oh.make_node("Reshape", ["c", "view_shape"], ["y"], name="view", allowzero=1),
    ]
    return model(nodes, [tensor("x", ["batch", 3, 8, 8])], [tensor("y", ["batch", 6, 64])],
                 {"w": weight}, opset=opset)


def with_symbolic_batch(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose inputs and outputs declare dimension 0 as ``batch`` (what compile's batch
    gears do to a model before running it at each gear)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for value in [*copy.graph.input, *copy.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    del copy.graph.value_info[:]
    return copy


def dynamo_upsample(side: int = 4, size: int = 16, opset: int = 18) -> onnx.ModelProto:
    """``F.interpolate(x, size=(size, size), mode="bilinear")`` on a [batch, 2, side, side] input
    as the dynamo exporter spells it: ``Resize(x, sizes=Concat(Shape(x)[0:2], [size, size]))``."""
    nodes = [
        oh.make_node("Shape", ["x"], ["x_nc"], name="shape", start=0, end=2),
        oh.make_node("Constant", [], ["hw"], name="c_hw", value_ints=[size, size]),
        oh.make_node("Concat", ["x_nc", "hw"], ["sizes"], name="concat", axis=0),
        oh.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="upsample", mode="linear",
                     coordinate_transformation_mode="half_pixel"),
    ]
    return model(nodes, [tensor("x", ["batch", 2, side, side])],
                 [tensor("y", ["batch", 2, size, size])], opset=opset)
