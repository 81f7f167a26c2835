"""quantize's API and CLI: the report the compile stage reads, the user's keep list, calibration
inputs, names kept through the conversion, errors and exit codes."""

import json
import sys

import numpy as np
import onnx
import pytest

import edgefuse
from edgefuse.acl.compile.precision import read_keep_fp32
from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.optimize import optimize
from edgefuse.quantize import quantize
from tests.quantize.graphs import cancellation, conv_net, make_model, node

pytestmark = pytest.mark.ort

# The package attribute edgefuse.quantize is the function; the module is in sys.modules.
quantize_module = sys.modules["edgefuse.quantize"]


def _sigmoid_net() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             node("Sigmoid", ["c"], ["s"], name="gate"),
             node("Mul", ["c", "s"], ["y"], name="silu")]
    return make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 4, 8, 8]},
                      {"w": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)})


def test_report_carries_the_keep_fp32_decision_the_compile_stage_reads(tmp_path):
    report_path = tmp_path / "fp16.json"
    result = quantize(_sigmoid_net(), keep_fp32="Sigmoid,conv", report_path=report_path)
    data = json.loads(report_path.read_text())
    assert data["keep_fp32"] == {"nodes": ["conv", "gate"], "op_types": ["Sigmoid"]}
    keep = read_keep_fp32(report_path)
    assert keep.nodes == ("conv", "gate") and keep.op_types == ("Sigmoid",)
    assert data["atc"]["keep_dtype_cfg"] == "conv\ngate\n"
    assert data["atc"]["modify_mixlist"] == {"black-list": {"to-add": ["Sigmoid"]}}
    assert {d["rule"] for d in data["decisions"]} == {"user"}
    assert data["passed"] and result.passed
    assert {n.name for n in result.model.graph.node} >= {"conv", "gate", "silu"}


def test_every_fp32_tensor_name_survives_the_conversion():
    model = conv_net()
    fp32 = optimize(model).model
    quantized = quantize(model, keep_fp32="relu1").model
    fp32_names = {o for n in fp32.graph.node for o in n.output}
    fp16_names = {o for n in quantized.graph.node for o in n.output}
    assert fp32_names <= fp16_names


def test_unknown_or_conflicting_keep_entries_are_user_errors():
    with pytest.raises(InputError, match="'Sigmod' is neither a node name nor an op type") as err:
        quantize(_sigmoid_net(), keep_fp32="Sigmod")
    assert "did you mean Sigmoid" in err.value.hint
    with pytest.raises(InputError, match="none cannot be combined"):
        quantize(_sigmoid_net(), keep_fp32="none,gate")


def test_calibration_inputs_must_match_the_model(tmp_path):
    model = conv_net()
    wrong_name = tmp_path / "name.npz"
    np.savez(wrong_name, images=np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(InputError, match=r"name.npz: missing input\(s\) 'x'; unknown input\(s\) "
                                         r"'images'") as err:
        quantize(model, inputs=wrong_name)
    assert err.value.reference == "bad-feeds"
    with pytest.raises(InputError, match=r"input 'x' expects float32\[1,3,8,8\], got "
                                         r"float32\[1,3,4,4\]"):
        quantize(model, inputs={"x": np.zeros((1, 3, 4, 4), np.float32)})
    with pytest.raises(InputError, match=r"input 'x' expects float32\[1,3,8,8\], got int64"):
        quantize(model, inputs={"x": np.zeros((1, 3, 8, 8), np.int64)})


def test_a_folder_of_npz_files_is_a_calibration_set(tmp_path):
    rng = np.random.default_rng(0)
    for index in range(3):
        np.savez(tmp_path / f"{index}.npz", x=rng.standard_normal((1, 3, 8, 8)))  # float64: cast
    result = quantize(conv_net(), inputs=tmp_path)
    assert result.report.settings["calibration"] == {"source": str(tmp_path), "seed": None,
                                                     "samples": 3}


def test_cli_writes_model_and_report_and_exits_by_the_gate(tmp_path, capsys):
    source, target, report = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(cancellation(), source)
    code = main(["quantize", str(source), "-o", str(target), "--fp16", "--keep-fp32", "none",
                 "--report", str(report)])
    assert code == 1 and target.exists()
    assert json.loads(report.read_text())["passed"] is False
    assert "FAILED" in capsys.readouterr().out
    code = main(["quantize", str(source), "-o", str(target), "--fp16", "--keep-io-types",
                 "--report", str(report)])
    assert code == 0
    loaded = onnx.load(target)
    assert loaded.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_cli_usage_errors_and_policy_listing(tmp_path, capsys):
    source = tmp_path / "in.onnx"
    onnx.save(conv_net(), source)
    assert main(["quantize", str(source), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "error[no-precision]" in capsys.readouterr().err
    assert main(["quantize", "--show-policy"]) == 0
    out = capsys.readouterr().out
    assert "large-reduction" in out and "unbounded-exp" in out
    fp16 = tmp_path / "fp16.onnx"
    assert main(["quantize", str(source), "-o", str(fp16), "--fp16"]) == 0
    assert main(["quantize", str(fp16), "-o", str(tmp_path / "again.onnx"), "--fp16"]) == 2
    assert "error[already-fp16]" in capsys.readouterr().err


def test_an_optimized_model_is_not_optimized_again(monkeypatch):
    runs = []
    real = quantize_module.optimize
    monkeypatch.setattr(quantize_module, "optimize", lambda m: runs.append(m) or real(m))
    raw = quantize(conv_net())
    assert len(runs) == 1 and raw.report.optimize["ran"]
    stamped = optimize(conv_net()).model
    assert {p.key: p.value for p in stamped.metadata_props}["edgefuse.optimize"] == "cpu"
    again = quantize(stamped)
    assert len(runs) == 1 and not again.report.optimize["ran"]
    assert "optimized already" in again.report.optimize["reason"]
    assert [n.name for n in again.model.graph.node] == [n.name for n in raw.model.graph.node]


def test_the_report_hands_compile_the_keep_set_in_memory(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "")  # no atc: compile writes the build without running ATC
    model = _sigmoid_net()
    result = quantize(model, keep_fp32="Sigmoid,conv")
    build = edgefuse.compile(optimize(model).model, "Ascend310B4", tmp_path / "build",
                             keep_fp32=result.report.keep)
    assert (tmp_path / "build" / "keep_dtype.cfg").read_text() == "conv\ngate\n"
    assert build.manifest.extra["precision"]["keep_fp32"] == {"nodes": ["conv", "gate"],
                                                              "op_types": ["Sigmoid"]}
