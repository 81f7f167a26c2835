"""Every bad ONNX input: exit code 2 through the CLI, a diagnostic, no traceback, no output file.

Each case is also checked through the Python API by its error message.
"""

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from edgefuse.cli.main import main
from edgefuse.convert import convert
from edgefuse.errors import InputError, ModelLoadError
from tests.convert.graphs import classifier, model, ort_run, relu, tensor

pytestmark = pytest.mark.ort


def cli_error(capsys, argv: list[str], output: Path) -> str:
    """Run the CLI; assert a user error (exit 2) with no traceback and no output file."""
    code = main(["convert", *argv, "-o", str(output)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert not output.exists()
    assert not [p for p in output.parent.iterdir() if p.name.startswith(f".{output.name}")]
    return err


def test_a_text_file_is_not_onnx(tmp_path, capsys):
    source = tmp_path / "notes.onnx"
    source.write_text("these are my notes, not a model\n")
    err = cli_error(capsys, [str(source)], tmp_path / "out.onnx")
    assert "error[not-onnx]" in err and "is not an ONNX model" in err
    with pytest.raises(ModelLoadError, match="is not an ONNX model"):
        convert(source)


def test_an_empty_file_is_not_onnx(tmp_path, capsys):
    source = tmp_path / "empty.onnx"
    source.write_bytes(b"")
    err = cli_error(capsys, [str(source)], tmp_path / "out.onnx")
    assert "is not an ONNX model" in err


def test_a_truncated_file_is_reported_as_truncated(tmp_path, capsys):
    data = classifier().SerializeToString()
    source = tmp_path / "cut.onnx"
    source.write_bytes(data[: len(data) // 2])
    err = cli_error(capsys, [str(source), "--input", "images:1,3,8,8"], tmp_path / "out.onnx")
    assert "error[truncated-model]" in err and "truncated or corrupted" in err
    assert f"{len(data) // 2} bytes" in err
    with pytest.raises(ModelLoadError, match="truncated or corrupted"):
        convert(source)


def test_a_missing_file(tmp_path, capsys):
    err = cli_error(capsys, [str(tmp_path / "nope.onnx")], tmp_path / "out.onnx")
    assert "error[file-not-found]" in err


def test_missing_external_data_names_the_tensor_and_the_file(tmp_path, capsys):
    source = tmp_path / "m.onnx"
    onnx.save(classifier(), source, save_as_external_data=True, location="m.weights",
              size_threshold=0)
    (tmp_path / "m.weights").unlink()
    err = cli_error(capsys, [str(source), "--input", "images:1,3,8,8"], tmp_path / "out.onnx")
    assert "error[missing-external-data]" in err
    assert "tensor 'conv.weight'" in err and str(tmp_path / "m.weights") in err
    with pytest.raises(ModelLoadError, match="external data of tensor 'conv.weight' is missing"):
        convert(source)


def test_truncated_external_data(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(classifier(), source, save_as_external_data=True, location="m.weights",
              size_threshold=0)
    data = tmp_path / "m.weights"
    data.write_bytes(data.read_bytes()[:10])
    with pytest.raises(ModelLoadError, match="external data of tensor '.*' is truncated"):
        convert(source)


def _custom_domain_model() -> onnx.ModelProto:
    nodes = [oh.make_node("Relu", ["x"], ["r"], name="act"),
             oh.make_node("Warp", ["r"], ["y"], name="warp_1", domain="com.acme.vision")]
    return model(nodes, [tensor("x", [1, 3])], [tensor("y", [1, 3])],
                 extra_opsets={"com.acme.vision": 1})


def test_an_unknown_op_domain_names_the_domain_and_the_nodes(tmp_path, capsys):
    source = tmp_path / "custom.onnx"
    onnx.save(_custom_domain_model(), source)
    err = cli_error(capsys, [str(source)], tmp_path / "out.onnx")
    assert "error[unknown-op-domain]" in err and "'com.acme.vision'" in err
    assert "warp_1 (Warp)" in err
    with pytest.raises(ModelLoadError, match="unknown domain.*'com.acme.vision'"):
        convert(_custom_domain_model())


def test_a_model_local_function_is_not_an_unknown_domain():
    proto = _custom_domain_model()
    body = [oh.make_node("Neg", ["a"], ["b"])]
    proto.functions.append(oh.make_function("com.acme.vision", "Warp", ["a"], ["b"], body,
                                            [oh.make_opsetid("", 13)]))
    result = convert(proto)
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    np.testing.assert_array_equal(ort_run(result, {"x": x})[0], -np.maximum(x, 0))


def test_a_graph_without_inputs(tmp_path, capsys):
    constant = oh.make_node("Constant", [], ["y"],
                            value=onnx.numpy_helper.from_array(np.ones(2, np.float32)))
    source = tmp_path / "const.onnx"
    onnx.save(model([constant], [], [tensor("y", [2])]), source)
    err = cli_error(capsys, [str(source)], tmp_path / "out.onnx")
    assert "error[graph-without-inputs]" in err and "has no graph inputs" in err
    with pytest.raises(ModelLoadError, match="has no graph inputs"):
        convert(source)


def test_dynamic_dims_without_input_name_the_input_and_dim(tmp_path, capsys):
    source = tmp_path / "dyn.onnx"
    onnx.save(classifier(), source)
    err = cli_error(capsys, [str(source)], tmp_path / "out.onnx")
    assert "error[dynamic-input-shape]" in err
    assert "input 'images' has dynamic dimension(s) 0 ('N')" in err
    assert "--input images:1,3,8,8" in err
    with pytest.raises(InputError, match=r"input 'images' has dynamic dimension\(s\) 0 \('N'\)"):
        convert(classifier())


def test_an_input_name_that_does_not_exist_lists_the_real_ones(tmp_path, capsys):
    source = tmp_path / "dyn.onnx"
    onnx.save(classifier(), source)
    err = cli_error(capsys, [str(source), "--input", "image:1,3,8,8"], tmp_path / "out.onnx")
    assert "error[unknown-input-name]" in err and "'image'" in err
    assert "the model's inputs: images" in err
    with pytest.raises(InputError, match="'image', which the model does not have"):
        convert(classifier(), inputs={"image": (1, 3, 8, 8)})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("images:1,3,8", "has rank 4, but the given shape has 3 dims"),
        ("images:1,4,8,8", "contradicts its static dims"),
        ("images:1,3,8,x", "'x' is not an integer"),
    ],
)
def test_shapes_that_do_not_fit(tmp_path, capsys, spec, message):
    source = tmp_path / "dyn.onnx"
    onnx.save(classifier(), source)
    err = cli_error(capsys, [str(source), "--input", spec], tmp_path / "out.onnx")
    assert message in err


def test_an_unsupported_opset_request(tmp_path, capsys):
    source = tmp_path / "relu.onnx"
    onnx.save(relu(), source)
    err = cli_error(capsys, [str(source), "--opset", "8"], tmp_path / "out.onnx")
    assert "error[unsupported-opset]" in err and "opset 8 is not supported" in err


def test_a_model_newer_than_supported_asks_for_opset(tmp_path):
    with pytest.raises(InputError, match="uses opset 23, newer than the supported") as info:
        convert(relu(opset=23))
    assert "--opset 21" in info.value.hint


def test_an_invalid_graph_is_a_load_error():
    broken = relu()
    broken.graph.node[0].input[0] = "undefined_value"
    with pytest.raises(ModelLoadError, match="not valid ONNX"):
        convert(broken)


def test_a_missing_output_directory_is_refused_before_converting(tmp_path, capsys):
    source = tmp_path / "relu.onnx"
    onnx.save(relu(), source)
    code = main(["convert", str(source), "-o", str(tmp_path / "no" / "out.onnx")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_failed_convert_keeps_an_existing_output_untouched(tmp_path, capsys):
    output = tmp_path / "out.onnx"
    output.write_bytes(b"previous result")
    source = tmp_path / "dyn.onnx"
    onnx.save(classifier(), source)
    assert main(["convert", str(source), "-o", str(output)]) == 2
    assert output.read_bytes() == b"previous result"
