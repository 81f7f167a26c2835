"""What "canonical" promises: fixed dims, inferred shapes, folded constants, kept names, opsets.

Every structural check is paired with ONNX Runtime numbers against the source model.
"""

import logging
import sys

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from edgefuse.cli.main import main
from edgefuse.convert import SUPPORTED_OPSETS, convert
from edgefuse.errors import ModelLoadError
from tests.convert.graphs import classifier, metadata, model, opset_of, ort_run, relu, tensor

pytestmark = pytest.mark.ort

BATCH2 = {"images": (2, 3, 8, 8)}


def _images(batch: int = 2) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def _dims(value: onnx.ValueInfoProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param
            for d in value.type.tensor_type.shape.dim]


def _assert_same_outputs(candidate, reference, feeds):
    for got, expected in zip(ort_run(candidate, feeds), ort_run(reference, feeds), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_dynamic_dims_are_fixed_and_shapes_inferred():
    result = convert(classifier(), inputs=BATCH2)
    assert _dims(result.graph.input[0]) == [2, 3, 8, 8]
    assert [_dims(v) for v in result.graph.output] == [[2, 4, 8, 8], [2, 4]]
    inferred = {v.name: _dims(v) for v in result.graph.value_info}
    assert inferred["conv_out"] == [2, 4, 8, 8]


def test_shape_chain_is_folded_and_constants_become_initializers():
    result = convert(classifier(), inputs=BATCH2)
    ops = [node.op_type for node in result.graph.node]
    assert ops == ["Conv", "Relu", "ReduceMean", "Reshape"]
    initializers = {tensor.name for tensor in result.graph.initializer}
    assert "unused.weight" not in initializers
    assert {"conv.weight", "conv.bias"} <= initializers
    _assert_same_outputs(result, classifier(), {"images": _images()})


def test_names_are_kept_and_unnamed_nodes_get_optype_index_names():
    result = convert(classifier(), inputs=BATCH2)
    names = [node.name for node in result.graph.node]
    assert names[:3] == ["backbone/conv", "backbone/relu", "head/pool"]
    assert names[3] == "Reshape_8"  # its index in the source graph
    assert [v.name for v in result.graph.output] == ["features", "pooled"]
    assert result.graph.node[1].output[0] == "features"


def test_unnamed_node_names_do_not_collide_with_existing_ones():
    nodes = [oh.make_node("Relu", ["x"], ["a"], name="Relu_1"), oh.make_node("Relu", ["a"], ["y"])]
    result = convert(model(nodes, [tensor("x", [1, 2])], [tensor("y", [1, 2])]))
    assert [node.name for node in result.graph.node] == ["Relu_1", "Relu_1_1"]


def test_provenance_is_recorded(tmp_path):
    source = tmp_path / "cls.onnx"
    onnx.save(classifier(), source)
    result = convert(source, inputs=BATCH2)
    assert metadata(result) == {
        "edgefuse.source": str(source), "edgefuse.exporter": "none (ONNX source)"}


def test_cli_writes_the_model_and_prints_a_summary(tmp_path, capsys):
    source, output = tmp_path / "cls.onnx", tmp_path / "out.onnx"
    onnx.save(classifier(), source)
    assert main(["convert", str(source), "-o", str(output), "--input", "images:2,3,8,8"]) == 0
    out = capsys.readouterr().out
    assert "opset 13; 4 nodes" in out
    assert "inputs: images float32[2,3,8,8]" in out
    assert "outputs: features float32[2,4,8,8], pooled float32[2,4]" in out
    written = onnx.load(output)
    onnx.checker.check_model(written, full_check=True)
    assert len(written.graph.node) == 4


def test_an_unnamed_cli_shape_fits_a_single_input_model(tmp_path, capsys):
    source, output = tmp_path / "cls.onnx", tmp_path / "out.onnx"
    onnx.save(classifier(), source)
    assert main(["convert", str(source), "-o", str(output), "--input", "1,3,8,8"]) == 0
    assert _dims(onnx.load(output).graph.input[0]) == [1, 3, 8, 8]


def test_external_data_round_trip(tmp_path):
    source = tmp_path / "ext.onnx"
    onnx.save(classifier(), source, save_as_external_data=True, location="ext.weights",
              size_threshold=0)
    output = tmp_path / "out.onnx"
    convert(source, inputs=BATCH2, output=output)
    written = onnx.load(output)  # small enough to come back as one self-contained file
    weight = next(t for t in written.graph.initializer if t.name == "conv.weight")
    assert weight.data_location == onnx.TensorProto.DEFAULT
    _assert_same_outputs(written, classifier(), {"images": _images()})


def _unsqueeze_sum(opset: int) -> onnx.ModelProto:
    """Unsqueeze and ReduceSum: their axes moved from attribute to input at opsets 13 and 13."""
    if opset < 13:
        nodes = [oh.make_node("Unsqueeze", ["x"], ["u"], name="unsq", axes=[0]),
                 oh.make_node("ReduceSum", ["u"], ["y"], name="sum", axes=[2], keepdims=0)]
        initializers = {}
    else:
        nodes = [oh.make_node("Unsqueeze", ["x", "axes0"], ["u"], name="unsq"),
                 oh.make_node("ReduceSum", ["u", "axes2"], ["y"], name="sum", keepdims=0)]
        initializers = {"axes0": np.array([0]), "axes2": np.array([2])}
    return model(nodes, [tensor("x", [3, 4])], [tensor("y", [1, 3])], initializers, opset=opset)


def test_opset_11_model_upgraded_on_request_and_verified():
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    result = convert(_unsqueeze_sum(11), opset=17)
    assert opset_of(result) == 17
    assert len(result.graph.node[0].input) == 2  # axes became an input
    assert metadata(result)["edgefuse.converted_from_opset"] == "11"
    np.testing.assert_allclose(ort_run(result, {"x": x})[0], x.sum(axis=1)[None], rtol=1e-6)


def test_an_opset_older_than_supported_is_upgraded_to_the_lowest_supported():
    result = convert(relu(opset=9))
    assert opset_of(result) == SUPPORTED_OPSETS.start
    assert metadata(result)["edgefuse.converted_from_opset"] == "9"


def test_a_supported_opset_is_left_alone():
    result = convert(_unsqueeze_sum(13))
    assert opset_of(result) == 13
    assert "edgefuse.converted_from_opset" not in metadata(result)


def test_down_conversion_is_verified_and_applied(tmp_path, capsys):
    source, output = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_unsqueeze_sum(13), source)
    assert main(["convert", str(source), "-o", str(output), "--opset", "11"]) == 0
    assert "opset 13 -> 11" in capsys.readouterr().out
    result = onnx.load(output)
    assert opset_of(result) == 11
    assert [a.name for a in result.graph.node[0].attribute] == ["axes"]
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_run(result, {"x": x})[0], x.sum(axis=1)[None], rtol=1e-6)


def test_down_conversion_of_an_op_onnx_has_no_adapter_for(tmp_path):
    """onnx's own converter fails here ("No Adapter From Version $14 for Relu")."""
    result = convert(relu(opset=14), opset=13)
    assert opset_of(result) == 13
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 3, 4, 4)
    np.testing.assert_array_equal(ort_run(result, {"x": x})[0], np.maximum(x, 0))


def test_a_down_conversion_the_converter_cannot_do_is_an_error(tmp_path, capsys):
    gelu = model([oh.make_node("Gelu", ["x"], ["y"], name="gelu")],
                 [tensor("x", [2, 3])], [tensor("y", [2, 3])], opset=20)
    source, output = tmp_path / "gelu.onnx", tmp_path / "out.onnx"
    onnx.save(gelu, source)
    code = main(["convert", str(source), "-o", str(output), "--opset", "17"])
    err = capsys.readouterr().err
    assert code == 2 and not output.exists()
    assert "error[opset-conversion-failed]" in err and "from opset 20 to 17" in err
    assert "'gelu' (Gelu) does not exist at opset 17" in err


def test_a_down_conversion_that_changes_the_outputs_is_refused(monkeypatch):
    canonical = sys.modules["edgefuse.convert.canonical"]
    real = canonical.downgrade

    def wrong_converter(proto, target):
        converted = real(proto, target)
        converted.graph.node[1].op_type = "ReduceMax"  # a mistranslated op
        return converted

    monkeypatch.setattr(canonical, "downgrade", wrong_converter)
    with pytest.raises(ModelLoadError, match="from opset 13 to 11 changed the model's outputs"):
        convert(_unsqueeze_sum(13), opset=11)


def test_an_upgrade_of_a_model_ort_cannot_run_is_accepted_with_a_warning(monkeypatch, caplog):
    def cannot_run(proto, feeds):
        raise ModelLoadError("ONNX Runtime cannot load the model: no kernel for this old op")

    monkeypatch.setattr(sys.modules["edgefuse.convert.canonical"], "run_onnx", cannot_run)
    with caplog.at_level(logging.WARNING):
        result = convert(relu(opset=9))
    assert opset_of(result) == SUPPORTED_OPSETS.start
    assert "upgrade not verified" in caplog.text


def test_split_to_sequence_is_not_folded_into_an_opset_18_split_below_18():
    nodes = [
        oh.make_node("SplitToSequence", ["x", "size"], ["seq"], name="split", axis=1),
        oh.make_node("SequenceAt", ["seq", "index"], ["y"], name="first"),
    ]
    proto = model(nodes, [tensor("x", [2, 6])], [tensor("y", [2, 3])],
                  {"size": np.array(3), "index": np.array(0)}, opset=13)
    result = convert(proto)
    for node in result.graph.node:
        assert "num_outputs" not in [a.name for a in node.attribute]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(ort_run(result, {"x": x})[0], x[:, :3])


def test_an_ir3_model_with_weights_as_inputs_becomes_a_model_with_weights_as_constants():
    weight = np.arange(4, dtype=np.float32).reshape(2, 2)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
        [tensor("x", [1, 2]), tensor("W", [2, 2])], [tensor("y", [1, 2])],
        [onnx.numpy_helper.from_array(weight, "W")],
    )
    old = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 8)], ir_version=3)
    result = convert(old)
    assert [v.name for v in result.graph.input] == ["x"]
    assert result.ir_version >= 6 and opset_of(result) == SUPPORTED_OPSETS.start
    x = np.array([[1.0, 2.0]], np.float32)
    np.testing.assert_array_equal(ort_run(result, {"x": x})[0], x @ weight)
