"""The FP16 converter: types, Casts, names, numbers, constants that do not fit, errors."""

from collections import Counter

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from edgefuse.errors import InputError
from edgefuse.quantize.fp16 import cancelling_cast_pairs, check_float32_model, convert_fp16
from edgefuse.reference.fp16 import coerce_feeds, run_fp16_storage
from edgefuse.reference.onnx_runner import run_onnx
from tests.quantize.graphs import conv_net, cosine, feeds, make_model, node

pytestmark = pytest.mark.ort

F16, F32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT


def _convert(model: onnx.ModelProto, keep=(), keep_io_types=False):
    converted = ir.serde.deserialize_model(model)
    conversion = convert_fp16(converted, set(keep), keep_io_types=keep_io_types)
    proto = ir.serde.serialize_model(converted)
    onnx.checker.check_model(proto, full_check=True)
    return proto, conversion


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def test_all_fp16_model_has_no_casts_and_equals_force_fp16_emulation_exactly():
    model = conv_net()
    converted, conversion = _convert(model)
    assert _ops(converted)["Cast"] == 0 and conversion.casts_inserted == 0
    assert converted.graph.input[0].type.tensor_type.elem_type == F16
    assert converted.graph.output[0].type.tensor_type.elem_type == F16
    assert {t.data_type for t in converted.graph.initializer} == {F16}
    assert [n.name for n in converted.graph.node] == [n.name for n in model.graph.node]
    inputs = feeds(model)
    # Two code paths, one answer: the converted model with FP16 storage emulated, and the FP32
    # model with every tensor rounded (ATC's force_fp16) agree bit for bit.
    np.testing.assert_array_equal(
        run_fp16_storage(converted, inputs)["y"].astype(np.float32),
        run_fp16_storage(model, inputs)["y"],
    )
    plain = run_onnx(converted, coerce_feeds(converted, inputs))["y"]
    assert plain.dtype == np.float16 and cosine(run_onnx(model, inputs)["y"], plain) > 0.999


def test_keep_io_types_casts_only_at_the_boundary_and_keeps_names():
    model = conv_net()
    converted, conversion = _convert(model, keep_io_types=True)
    casts = [n for n in converted.graph.node if n.op_type == "Cast"]
    assert len(casts) == conversion.casts_inserted == 2
    assert casts[0].input == ["x"] and casts[-1].output == ["y"]
    assert converted.graph.input[0].type.tensor_type.elem_type == F32
    assert converted.graph.output[0].name == "y"
    assert converted.graph.output[0].type.tensor_type.elem_type == F32


def test_kept_node_gets_one_cast_on_each_side_and_no_pair_cancels():
    model = conv_net()
    converted, conversion = _convert(model, keep={"relu1"})
    assert conversion.fp32_nodes == ["relu1"]
    order = [(n.op_type, list(n.input)) for n in converted.graph.node]
    assert order[:4] == [("Conv", ["x", "w1", "b1"]), ("Cast", ["c1"]), ("Relu", ["c1.fp32"]),
                         ("Cast", ["r1"])]
    assert cancelling_cast_pairs(ir.serde.deserialize_model(converted).graph) == []
    types = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(converted).graph.value_info}
    assert types["c1"] == F16 and types["r1"] == F32 and types["r1.fp16"] == F16


def test_cancelling_pair_detector_flags_lossless_round_trips_only():
    nodes = [
        node("Cast", ["x"], ["h"], to=F16, name="down"),
        node("Cast", ["h"], ["f"], to=F32, name="up"),  # lossy: a rounding, not a no-op
        node("Cast", ["f"], ["h2"], to=F16, name="down2"),
        node("Relu", ["h2"], ["r"], name="relu"),
        node("Cast", ["r"], ["w"], to=F32, name="widen"),
        node("Cast", ["w"], ["y"], to=F16, name="narrow"),  # widen then narrow: cancels
    ]
    graph = onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("x", F32, [2])],
        [onnx.helper.make_tensor_value_info("y", F16, [2])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    pairs = cancelling_cast_pairs(ir.serde.deserialize_model(model).graph)
    assert [(a.name, b.name) for a, b in pairs] == [("up", "down2"), ("widen", "narrow")]


def test_constant_beyond_fp16_keeps_its_reader_fp32_unclamped():
    nodes = [node("Mul", ["x", "big"], ["m"], name="scale"), node("Relu", ["m"], ["y"], name="r")]
    model = make_model(nodes, {"x": [4]}, {"y": [4]}, {"big": np.array([1e5], np.float32)})
    converted, conversion = _convert(model)
    decision = conversion.constant_decisions["scale"]
    assert decision.rule == "constant-overflow"
    assert "'big'" in decision.detail and "1e+05" in decision.detail
    big = _initializer(converted, "big")
    assert big.data_type == F32 and onnx.numpy_helper.to_array(big)[0] == 1e5
    x = np.array([1e-3, -2e-3, 3e-4, 0.5], np.float32)
    got = run_fp16_storage(converted, {"x": x})["y"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[:3], np.maximum(x[:3] * 1e5, 0), rtol=2e-3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.array([1e-9], np.float32), "flush to zero"),
        (np.full((64,), 3e-7, np.float32), "relative L2"),
    ],
)
def test_constant_lost_to_fp16_underflow_keeps_its_reader_fp32(value, expected):
    nodes = [node("Add", ["x", "eps"], ["y"], name="add_eps")]
    model = make_model(nodes, {"x": [64]}, {"y": [64]}, {"eps": value})
    _, conversion = _convert(model)
    decision = conversion.constant_decisions["add_eps"]
    assert decision.rule == "constant-underflow" and expected in decision.detail


def test_ordinary_weights_convert_without_decisions():
    _, conversion = _convert(conv_net())
    assert conversion.constant_decisions == {} and conversion.constants_converted == 3


def test_initializer_shared_by_fp16_and_fp32_readers_is_copied():
    rng = np.random.default_rng(0)
    nodes = [node("MatMul", ["x", "w"], ["a"], name="mm_fp16"),
             node("MatMul", ["x", "w"], ["b"], name="mm_fp32"),
             node("Add", ["a", "b"], ["y"], name="add")]
    model = make_model(nodes, {"x": [2, 4]}, {"y": [2, 4]},
                       {"w": rng.standard_normal((4, 4)).astype(np.float32)})
    converted, _ = _convert(model, keep={"mm_fp32"})
    assert _initializer(converted, "w").data_type == F32
    assert _initializer(converted, "w.fp16").data_type == F16
    readers = {n.name: list(n.input) for n in converted.graph.node}
    assert readers["mm_fp16"][1] == "w.fp16" and readers["mm_fp32"][1] == "w"


def test_resize_scales_stay_fp32_and_the_model_runs():
    nodes = [node("Resize", ["x", "", "scales"], ["y"], name="up", mode="linear")]
    model = make_model(nodes, {"x": [1, 2, 4, 4]}, {"y": [1, 2, 8, 8]},
                       {"scales": np.array([1, 1, 2, 2], np.float32)})
    converted, _ = _convert(model)
    assert _initializer(converted, "scales").data_type == F32
    x = feeds(model)
    assert cosine(run_onnx(model, x)["y"], run_fp16_storage(converted, x)["y"]) > 0.9999


def test_schema_without_fp16_keeps_range_fp32():
    nodes = [node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             node("Add", ["x", "r"], ["y"], name="add")]
    weights = {"start": np.array(0, np.float32), "limit": np.array(4, np.float32),
               "delta": np.array(1, np.float32)}
    model = make_model(nodes, {"x": [4]}, {"y": [4]}, weights)
    converted, _ = _convert(model)
    range_node = next(n for n in converted.graph.node if n.op_type == "Range")
    assert list(range_node.input) == ["start", "limit", "delta"]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_fp16_storage(converted, {"x": x})["y"], 2 * x)


def test_already_fp16_and_non_fp32_models_are_refused():
    fp16, _ = _convert(conv_net())
    with pytest.raises(InputError, match="already holds float16") as err:
        check_float32_model(ir.serde.deserialize_model(fp16))
    assert err.value.reference == "already-fp16"
    graph = onnx.helper.make_graph(
        [node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [2])])
    double = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    with pytest.raises(InputError, match="holds double tensors") as err:
        check_float32_model(ir.serde.deserialize_model(double))
    assert err.value.reference == "not-fp32-model"
