"""The tiny models the profile tests run: Conv -> BatchNorm -> Relu -> Add, before and after
optimize, saved as files the CLI can take."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

from edgefuse.optimize import optimize

# Conv 1x3x16x16 -> 1x8x16x16, 3x3 pad 1, no bias: 2048 outputs x 27 MACs
CONV_FLOPS = 2 * 2048 * 27
BN_FLOPS = 2 * 2048
RELU_FLOPS = 2048


def conv_bn_relu() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")]
    for name in ("scale", "bias", "mean", "var"):
        values = rng.random(8).astype(np.float32) + 0.5
        weights.append(numpy_helper.from_array(values, f"bn.{name}"))
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        oh.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
                     ["b"], name="bn"),
        oh.make_node("Relu", ["b"], ["r"], name="relu"),
        oh.make_node("Add", ["r", "r"], ["y"], name="add"),
    ]
    graph = oh.make_graph(nodes, "conv_bn_relu",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                          weights)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def saved_pair(folder: Path) -> tuple[Path, Path]:
    before, after = folder / "model.onnx", folder / "model.opt.onnx"
    onnx.save(conv_bn_relu(), str(before))
    optimize(str(before), output=str(after))
    return before, after
