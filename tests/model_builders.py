"""Tiny ONNX graphs for the runtime tests, built with onnx.helper, and fake OMs for the stand-in.

IR version 10 keeps them loadable by every ONNX Runtime the project supports.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.manifest import AippRecord, BuildManifest, TensorEntry, write_manifest

OPSET = 17
IR_VERSION = 10


def _model(nodes, inputs, outputs, initializers=(), functions=(), domains=()) -> onnx.ModelProto:
    graph = oh.make_graph(list(nodes), "tiny", list(inputs), list(outputs), list(initializers))
    opsets = [oh.make_opsetid("", OPSET), *(oh.make_opsetid(d, 1) for d in domains)]
    model = oh.make_model(graph, opset_imports=opsets, functions=list(functions),
                          ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def conv_net(batch: int | str = 1) -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, plus a second output (the features)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "fc"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fcb"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("GlobalAveragePool", ["r"], ["g"]),
        oh.make_node("Flatten", ["g"], ["features"]),
        oh.make_node("Gemm", ["features", "fc", "fcb"], ["logits"], transB=1),
    ]
    return _model(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 5]),
         oh.make_tensor_value_info("features", TensorProto.FLOAT, [batch, 4])],
        weights,
    )


def fp16_model() -> onnx.ModelProto:
    """float16 in, float16 out: y = x * 0.5 + 1."""
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float16), "half")
    one = numpy_helper.from_array(np.array(1.0, dtype=np.float16), "one")
    return _model(
        [oh.make_node("Mul", ["x", "half"], ["m"]), oh.make_node("Add", ["m", "one"], ["y"])],
        [oh.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])],
        [half, one],
    )


def uint8_model() -> onnx.ModelProto:
    """A camera frame in (uint8 NHWC), float32 out: y = x / 255."""
    scale = numpy_helper.from_array(np.array(1 / 255, dtype=np.float32), "scale")
    return _model(
        [oh.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
         oh.make_node("Mul", ["f", "scale"], ["y"])],
        [oh.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 4, 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 3])],
        [scale],
    )


def two_input_model() -> onnx.ModelProto:
    """y = a + b with a named dynamic batch."""
    return _model(
        [oh.make_node("Add", ["a", "b"], ["y"])],
        [oh.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
         oh.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )


def hardswish_function_model(with_function: bool = True) -> onnx.ModelProto:
    """One node of a custom op ``edgefuse::HardSwishX`` carried as a model-local function."""
    function = oh.make_function(
        "edgefuse", "HardSwishX", ["X"], ["Y"],
        [
            oh.make_node("Constant", [], ["three"], value_float=3.0),
            oh.make_node("Constant", [], ["six"], value_float=6.0),
            oh.make_node("Constant", [], ["zero"], value_float=0.0),
            oh.make_node("Add", ["X", "three"], ["a"]),
            oh.make_node("Clip", ["a", "zero", "six"], ["c"]),
            oh.make_node("Mul", ["X", "c"], ["m"]),
            oh.make_node("Div", ["m", "six"], ["Y"]),
        ],
        opset_imports=[oh.make_opsetid("", OPSET)],
    )
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["r"]),
         oh.make_node("HardSwishX", ["x"], ["h"], domain="edgefuse"),
         oh.make_node("Sub", ["h", "r"], ["y"])],
        "custom",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
    )
    return oh.make_model(
        graph,
        opset_imports=[oh.make_opsetid("", OPSET), oh.make_opsetid("edgefuse", 1)],
        functions=[function] if with_function else [],
        ir_version=IR_VERSION,
    )


def swish_model(alpha: float | None = None) -> onnx.ModelProto:
    """One ``edgefuse::Swish`` node (an op edgefuse declares) and no function in the model."""
    attributes = {} if alpha is None else {"alpha": alpha}
    graph = oh.make_graph(
        [oh.make_node("Swish", ["x"], ["y"], domain="edgefuse", **attributes)],
        "swish",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
    )
    return oh.make_model(
        graph, opset_imports=[oh.make_opsetid("", OPSET), oh.make_opsetid("edgefuse", 1)],
        ir_version=IR_VERSION,
    )


def hardswish_reference(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6) / 6 - np.maximum(x, 0)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def aipp_build(tmp_path: Path, *, om: bool = False):
    """A BUILD_DIR whose OM takes 12x10 BGR frames (static AIPP) for ``conv_net``."""
    spec = AippSpec.from_dict({"input_format": "BGR888", "source_size": [10, 12],
                               "crop": [1, 2, 8, 8], "mean": [123.675, 116.28, 103.53],
                               "std": [58.395, 57.12, 57.375]})
    build = tmp_path / "aipp"
    build.mkdir()
    save(conv_net(), build / "model.onnx")
    if om:
        (build / "model.om").write_bytes(b"om")
    write_manifest(build, BuildManifest(
        model="model.onnx", om="model.om" if om else None, soc="Ascend310B4",
        edgefuse_version="0.1.0",
        inputs=(TensorEntry("x", (1, 12, 10, 3), "uint8", "NHWC"),),
        outputs=(TensorEntry("logits", (1, 5), "float32"),
                 TensorEntry("features", (1, 4), "float32")),
        preprocess=AippRecord(input="x", related_input_rank=0, spec=spec,
                              model_input_shape=(1, 3, 8, 8)),
    ))
    return build, spec
