"""FLOPs and bytes per node against values worked out by hand from the op definitions."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.profile.cost import node_cost, tensor_infos

pytestmark = pytest.mark.unit

F32 = 4


def _one_node(node, inputs, output_shape=None, weights=()):
    graph = oh.make_graph(
        [node], "g",
        [oh.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs],
        [oh.make_tensor_value_info(node.output[0], TensorProto.FLOAT, output_shape)],
        [numpy_helper.from_array(np.zeros(shape, np.float32), name) for name, shape in weights])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    return node_cost(node, tensor_infos(model))


def test_conv_counts_two_flops_per_mac_plus_the_bias():
    # 1x3x8x8 -> 1x4x8x8 (3x3, pad 1): 256 outputs, each 3*3*3 = 27 MACs, + 1 bias add
    node = oh.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    cost = _one_node(node, [("x", [1, 3, 8, 8])], weights=[("w", [4, 3, 3, 3]), ("b", [4])])
    assert cost.flops == 256 * (2 * 27 + 1) == 14080
    assert cost.bytes_read == (192 + 108 + 4) * F32
    assert cost.bytes_written == 256 * F32
    assert cost.unit == "cube"


def test_strided_conv_counts_only_the_outputs_it_makes():
    # 1x2x8x8, 2x2 kernel, stride 2 -> 1x6x4x4 = 96 outputs, each 2*2*2 = 8 MACs, no bias
    node = oh.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2])
    cost = _one_node(node, [("x", [1, 2, 8, 8])], weights=[("w", [6, 2, 2, 2])])
    assert cost.flops == 96 * 2 * 8 == 1536


def test_depthwise_conv_multiplies_one_input_channel_per_output():
    # group = C = 8: 1x8x10x10 -> 1x8x10x10 (3x3 pad 1), 800 outputs x 9 MACs
    node = oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=8)
    cost = _one_node(node, [("x", [1, 8, 10, 10])], weights=[("w", [8, 1, 3, 3])])
    assert cost.flops == 800 * 2 * 9 == 14400
    assert cost.bytes == (800 + 72 + 800) * F32


def test_grouped_conv_divides_the_input_channels_by_the_groups():
    # group 2: 1x4x5x5 -> 1x6x5x5 (1x1); each output sees 4 / 2 = 2 input channels
    node = oh.make_node("Conv", ["x", "w"], ["y"], group=2)
    cost = _one_node(node, [("x", [1, 4, 5, 5])], weights=[("w", [6, 2, 1, 1])])
    assert cost.flops == 150 * 2 * 2 == 600


def test_conv_transpose_scatters_every_input_element():
    # 1x4x3x3 -> 1x2x6x6 (2x2, stride 2): 36 inputs x 2 out channels x 4 taps MACs
    node = oh.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    cost = _one_node(node, [("x", [1, 4, 3, 3])], weights=[("w", [4, 2, 2, 2])])
    assert cost.flops == 2 * 36 * 2 * 4 == 576


def test_gemm_counts_the_inner_dimension_and_the_c_add():
    # [2, 16] x [16, 10]^T (transB) + c[10]: 20 outputs x 16 MACs + 20 adds
    node = oh.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1)
    cost = _one_node(node, [("a", [2, 16])], weights=[("w", [10, 16]), ("c", [10])])
    assert cost.flops == 2 * 2 * 10 * 16 + 20 == 660
    assert cost.unit == "cube"


def test_batched_matmul_counts_every_batch():
    # [3, 4, 5] x [5, 6] -> [3, 4, 6]: 72 outputs x 5 MACs
    node = oh.make_node("MatMul", ["a", "b"], ["y"])
    cost = _one_node(node, [("a", [3, 4, 5]), ("b", [5, 6])])
    assert cost.flops == 2 * 72 * 5 == 720
    assert cost.bytes == (60 + 30 + 72) * F32


def test_max_pool_does_one_compare_per_window_element():
    # 1x2x8x8, 2x2 stride 2 -> 1x2x4x4 = 32 outputs x 4
    node = oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    cost = _one_node(node, [("x", [1, 2, 8, 8])])
    assert cost.flops == 128
    assert cost.unit == "vector"


def test_global_average_pool_reads_every_input_element_once():
    node = oh.make_node("GlobalAveragePool", ["x"], ["y"])
    cost = _one_node(node, [("x", [1, 16, 7, 7])])
    assert cost.flops == 16 * 49
    assert cost.bytes == (16 * 49 + 16) * F32


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_broadcast_elementwise_counts_one_per_output(op):
    node = oh.make_node(op, ["a", "b"], ["y"])
    cost = _one_node(node, [("a", [2, 3, 4]), ("b", [4])])
    assert cost.flops == 24
    assert cost.bytes == (24 + 4 + 24) * F32


def test_activation_counts_one_per_element_and_batchnorm_two():
    relu = _one_node(oh.make_node("Relu", ["x"], ["y"]), [("x", [1, 5, 2])])
    assert relu.flops == 10
    bn = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    cost = _one_node(bn, [("x", [1, 3, 2, 2])],
                     weights=[(n, [3]) for n in ("s", "b", "m", "v")])
    assert cost.flops == 2 * 12


def test_data_movement_has_no_flops_but_moves_its_bytes():
    node = oh.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1])
    cost = _one_node(node, [("x", [1, 4, 6])])
    assert cost.flops == 0
    assert cost.bytes == 2 * 24 * F32


@pytest.mark.parametrize(("mode", "per_output"), [
    (None, 1), ("nearest", 1), ("linear", 4), ("cubic", 4)])
def test_resize_costs_one_per_output_nearest_and_four_otherwise(mode, per_output):
    """1x2x4x4 -> 1x2x8x8 = 128 outputs. The attribute comes back from ONNX as bytes
    (b"linear"): a comparison with a str would cost every mode as nearest."""
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    attributes = {} if mode is None else {"mode": mode}
    node = oh.make_node("Resize", ["x", "", "scales"], ["y"], **attributes)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                  [1, 2, 4, 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
                          [scales])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    assert node_cost(node, tensor_infos(model)).flops == per_output * 128


def test_an_op_without_a_rule_is_not_counted_rather_than_zero():
    node = oh.make_node("NonMaxSuppression", ["boxes", "scores"], ["y"])
    graph = oh.make_graph([node], "g", [
        oh.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4, 4]),
        oh.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    assert node_cost(node, tensor_infos(model)).flops is None


def test_dynamic_dimensions_take_the_shapes_the_model_ran_with():
    node = oh.make_node("Relu", ["x"], ["y"])
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                  ["n", 3])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    assert node_cost(node, tensor_infos(model, {"x": (5, 3)})).flops == 15
    assert node_cost(node, tensor_infos(model)).flops is None
    onnx.checker.check_model(model)
