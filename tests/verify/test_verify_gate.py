"""verify: metrics against numpy formulas, the gate, inputs handling and the CLI exit codes."""

import numpy as np
import onnx
import pytest
from onnx import helper

from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.reference.compare import compare_arrays
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.verify import verify

pytestmark = pytest.mark.ort


def _scale_model(factor: float, shape=(2, 3)) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["y"])],
        "scale",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(shape))],
        [helper.make_tensor("k", onnx.TensorProto.FLOAT, [], [factor])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_compare_arrays_matches_textbook_formulas():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(100)
    b = a + rng.standard_normal(100) * 0.1
    cosine, max_abs, rel_l2 = compare_arrays(a.astype(np.float32), b.astype(np.float32))
    a64, b64 = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    assert cosine == pytest.approx(a64 @ b64 / np.linalg.norm(a64) / np.linalg.norm(b64), rel=1e-12)
    assert max_abs == pytest.approx(np.max(np.abs(a64 - b64)))
    assert rel_l2 == pytest.approx(np.linalg.norm(a64 - b64) / np.linalg.norm(a64))


def test_compare_arrays_edge_cases():
    assert compare_arrays(np.zeros(4), np.zeros(4)) == (1.0, 0.0, 0.0)
    assert compare_arrays(np.zeros(4), np.ones(4))[0] == 0.0
    cosine, max_abs, _ = compare_arrays(np.array([1.0, np.inf]), np.array([1.0, 2.0]))
    assert np.isnan(cosine) and max_abs == np.inf


def test_verify_passes_identical_and_fails_scaled_sign_flip():
    assert verify(_scale_model(2.0), _scale_model(2.0)).passed
    result = verify(_scale_model(2.0), _scale_model(-2.0))
    assert not result.passed
    assert result.outputs[0].cosine == pytest.approx(-1.0)


def test_verify_rel_l2_gate_catches_a_pure_scale_error():
    # Cosine is blind to a uniform scale error; the relative L2 gate is not.
    result = verify(_scale_model(2.0), _scale_model(2.2), max_rel_l2=1e-3)
    assert result.outputs[0].cosine == pytest.approx(1.0)
    assert result.outputs[0].rel_l2_error == pytest.approx(0.1, rel=1e-5)
    assert not result.passed


def test_random_feeds_take_a_batch_of_one_and_refuse_other_dynamic_dims():
    model = _scale_model(1.0)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    assert random_feeds(input_specs(model))["x"].shape == (1, 3)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "width"
    with pytest.raises(InputError, match="input 'x' has a dynamic dimension 1 .'width'."):
        random_feeds(input_specs(model))


def test_verify_with_inputs_file_that_does_not_match(tmp_path):
    np.savez(tmp_path / "in.npz", wrong=np.zeros((2, 3), np.float32))
    with pytest.raises(InputError,
                       match=r"in.npz: missing input\(s\) 'x'; unknown input\(s\) 'wrong'"):
        verify(_scale_model(1.0), _scale_model(1.0), inputs=tmp_path / "in.npz")


def test_cli_exit_codes_and_json(tmp_path, capsys):
    ref, good, bad = tmp_path / "ref.onnx", tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(_scale_model(2.0), ref)
    onnx.save(_scale_model(2.0), good)
    onnx.save(_scale_model(-2.0), bad)
    assert main(["verify", str(ref), str(good), "--json", str(tmp_path / "r.json")]) == 0
    assert '"passed": true' in (tmp_path / "r.json").read_text()
    assert main(["verify", str(ref), str(bad)]) == 1
    assert "FAILED" in capsys.readouterr().out
