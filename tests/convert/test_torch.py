"""PyTorch sources: factory strings, TorchScript files, live modules; parity with torch itself.

ORT (optimizations off) must reproduce torch's outputs to 1e-5 of their magnitude.
"""

import logging
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgefuse.cli.main import main
from edgefuse.convert import convert
from edgefuse.errors import InputError, ToolError
from tests.convert.graphs import metadata, opset_of, ort_run
from tests.needs import optional

torch = optional("torch")

from tests.convert.factories import tiny_net  # noqa: E402 - needs torch

pytestmark = [pytest.mark.torch, pytest.mark.ort]

ROOT = Path(__file__).resolve().parents[2]
FACTORY = "tests.convert.factories:tiny_net"


@pytest.fixture
def at_root(monkeypatch):
    """Factories are imported by name, as `edgefuse convert` would from the repository root."""
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))


def _assert_matches_torch(proto: onnx.ModelProto, module, *inputs: np.ndarray) -> None:
    with torch.no_grad():
        expected = module(*(torch.from_numpy(x) for x in inputs))
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    feeds = {value.name: x for value, x in zip(proto.graph.input, inputs, strict=True)}
    for got, want in zip(ort_run(proto, feeds), expected, strict=True):
        want = want.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _images(shape=(1, 3, 8, 8)) -> np.ndarray:
    return np.random.default_rng(5).standard_normal(shape).astype(np.float32)


def test_factory_through_the_cli_matches_torch(at_root, tmp_path, capsys):
    output = tmp_path / "tiny.onnx"
    assert main(["convert", FACTORY, "-o", str(output), "--input", "1,3,8,8"]) == 0
    out = capsys.readouterr().out
    assert "exporter: torch.onnx.export(dynamo=True, optimize=True, opset 18)" in out
    assert "inputs: input float32[1,3,8,8]" in out and "outputs: output float32[1,2]" in out
    proto = onnx.load(output)
    assert "BatchNormalization" not in [node.op_type for node in proto.graph.node]
    assert metadata(proto)["edgefuse.source"] == FACTORY
    _assert_matches_torch(proto, tiny_net(), _images())


def test_a_factory_that_raises_is_a_user_error(at_root, tmp_path, capsys):
    output = tmp_path / "out.onnx"
    code = main(["convert", "tests.convert.factories:broken_factory", "-o", str(output),
                 "--input", "1,3,8,8"])
    err = capsys.readouterr().err
    assert code == 2 and not output.exists() and "Traceback" not in err
    assert "error[factory-failed]" in err and "raised RuntimeError" in err
    assert "weights file 'missing.pth' not found" in err
    with pytest.raises(InputError, match="factory '.*broken_factory' raised RuntimeError"):
        convert("tests.convert.factories:broken_factory", inputs=(1, 3, 8, 8))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.convert.factories:not_a_module", "returned str, not a torch.nn.Module"),
        ("tests.convert.factories:no_such_name", "has no callable 'no_such_name'"),
        ("no_such_package.nets:build", "cannot import 'no_such_package.nets'"),
    ],
)
def test_bad_factories(at_root, spec, message):
    with pytest.raises(InputError, match=message):
        convert(spec, inputs=(1, 3, 8, 8))


def test_a_pytorch_source_without_shapes_asks_for_input(at_root, tmp_path, capsys):
    output = tmp_path / "out.onnx"
    assert main(["convert", FACTORY, "-o", str(output)]) == 2
    err = capsys.readouterr().err
    assert "error[missing-input-shape]" in err and "--input input:1,3,224,224" in err
    assert not output.exists()


def test_shapes_the_model_cannot_take_are_a_user_error(at_root):
    with pytest.raises(InputError, match=r"fails on example inputs of shape \[1, 4, 8, 8\]"):
        convert(FACTORY, inputs=(1, 4, 8, 8))


def test_torchscript_file(tmp_path, capsys):
    module = tiny_net()
    source = tmp_path / "traced.pt"
    torch.jit.save(torch.jit.trace(module, torch.from_numpy(_images())), str(source))
    output = tmp_path / "traced.onnx"
    assert main(["convert", str(source), "-o", str(output), "--input", "input:1,3,8,8"]) == 0
    proto = onnx.load(output)
    assert metadata(proto)["edgefuse.exporter"] == "torch.onnx.export(dynamo=False, opset 17)"
    assert "TorchScript module" in metadata(proto)["edgefuse.exporter_reason"]
    _assert_matches_torch(proto, module, _images())


def test_a_checkpoint_zip_is_not_torchscript(tmp_path, capsys):
    source = tmp_path / "weights.pth"
    torch.save(tiny_net().state_dict(), source)
    output = tmp_path / "out.onnx"
    assert main(["convert", str(source), "-o", str(output), "--input", "1,3,8,8"]) == 2
    err = capsys.readouterr().err
    assert "error[not-torchscript]" in err and "torch.save() checkpoint" in err


def test_module_api_with_two_named_inputs_and_two_outputs():
    class Pair(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a * b

    a, b = _images((2, 3)), _images((2, 3)) + 1
    proto = convert(Pair(), example_inputs=(torch.from_numpy(a), torch.from_numpy(b)),
                    inputs={"left": (2, 3), "right": (2, 3)}, exporter="torchscript")
    assert [v.name for v in proto.graph.input] == ["left", "right"]
    assert [v.name for v in proto.graph.output] == ["output_0", "output_1"]
    _assert_matches_torch(proto, Pair(), a, b)


def test_default_names_for_several_inputs():
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    examples = (torch.ones(1, 2), torch.ones(1, 2))
    proto = convert(Add(), example_inputs=examples, exporter="torchscript")
    assert [v.name for v in proto.graph.input] == ["input_0", "input_1"]


def test_an_opset_below_18_uses_the_torchscript_exporter_and_says_why():
    proto = convert(tiny_net(), inputs=(1, 3, 8, 8), opset=13)
    assert opset_of(proto) == 13
    assert "opset 13 requested" in metadata(proto)["edgefuse.exporter_reason"]
    _assert_matches_torch(proto, tiny_net(), _images())


def test_a_module_in_training_mode_is_exported_in_eval_mode_and_restored():
    module = tiny_net().train()
    proto = convert(module, inputs=(1, 3, 8, 8), exporter="torchscript")
    assert module.training
    _assert_matches_torch(proto, tiny_net(), _images())


def _failing_dynamo(*args, **kwargs):
    raise ToolError("the dynamo exporter failed", context="GuardOnDataDependentSymNode: ...",
                    reference="torch-export-failed")


def test_auto_falls_back_loudly_and_records_why(monkeypatch, caplog):
    monkeypatch.setattr(sys.modules["edgefuse.convert.torch_export"], "_dynamo", _failing_dynamo)
    with caplog.at_level(logging.WARNING):
        proto = convert(tiny_net(), inputs=(1, 3, 8, 8))
    assert "dynamo exporter failed" in caplog.text and "retrying" in caplog.text
    recorded = metadata(proto)
    assert recorded["edgefuse.exporter"] == "torch.onnx.export(dynamo=False, opset 17)"
    assert "GuardOnDataDependentSymNode" in recorded["edgefuse.exporter_fallback"]


def test_a_named_exporter_is_never_replaced(monkeypatch, at_root, tmp_path, capsys):
    monkeypatch.setattr(sys.modules["edgefuse.convert.torch_export"], "_dynamo", _failing_dynamo)
    output = tmp_path / "out.onnx"
    code = main(["convert", FACTORY, "-o", str(output), "--input", "1,3,8,8",
                 "--exporter", "dynamo"])
    err = capsys.readouterr().err
    assert code == 2 and not output.exists()
    assert "error[torch-export-failed]" in err and "GuardOnDataDependentSymNode" in err


def test_a_real_export_failure_is_reported_with_its_cause():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(ToolError, match="the dynamo exporter failed") as info:
        convert(DataDependent(), inputs=(1, 3), exporter="dynamo")
    assert "data-dependent" in info.value.context
