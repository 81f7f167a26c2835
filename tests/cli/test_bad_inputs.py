"""Bad input on every verb, as a new user types it: a clear error and no damage.

Each case runs the CLI and asserts: the documented exit code (2 for a user error, 1 for a gate
that failed), a message naming what is wrong, no traceback, and no output left behind (an output
that existed before is left exactly as it was). Permission cases run the CLI in a child process
without the capabilities that let root ignore file modes (``setpriv``), since CI runs as root.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.cli.main import main
from edgefuse.reference.recording import make_recording
from tests.model_builders import conv_net, fp16_model
from tests.needs import without_dac_override

pytestmark = pytest.mark.ort

ROOT = Path(__file__).resolve().parents[2]


# ---- the files a user might hand over -------------------------------------------------------


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _graph(nodes, inputs, outputs, initializers=(), *, opset=17, ir=8) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=ir)


def _x(shape=(1, 4)):
    return oh.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))


def _y(shape=(1, 4)):
    return oh.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))


def cyclic() -> onnx.ModelProto:
    return _graph([oh.make_node("Add", ["x", "b"], ["a"]), oh.make_node("Relu", ["a"], ["b"]),
                   oh.make_node("Identity", ["b"], ["y"])], [_x()], [_y()])


def duplicate_names() -> onnx.ModelProto:
    return _graph([oh.make_node("Relu", ["x"], ["a"]), oh.make_node("Neg", ["x"], ["a"]),
                   oh.make_node("Identity", ["a"], ["y"])], [_x()], [_y()])


def ir_version_99() -> onnx.ModelProto:
    return _graph([oh.make_node("Relu", ["x"], ["y"])], [_x()], [_y()], ir=99)


def opset_99() -> onnx.ModelProto:
    return _graph([oh.make_node("Relu", ["x"], ["y"])], [_x()], [_y()], opset=99)


def custom_domain() -> onnx.ModelProto:
    model = _graph([oh.make_node("Mystery", ["x"], ["y"], domain="acme")], [_x()], [_y()])
    model.opset_import.append(oh.make_opsetid("acme", 1))
    return model


def custom_domain_shapeless() -> onnx.ModelProto:
    """An output computed from a custom-domain op and declared without a shape."""
    model = _graph([oh.make_node("Mystery", ["x"], ["t"], domain="acme"),
                    oh.make_node("Relu", ["t"], ["y"])], [_x()],
                   [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model.opset_import.append(oh.make_opsetid("acme", 1))
    return model


def scalar_input() -> onnx.ModelProto:
    return _graph([oh.make_node("Relu", ["x"], ["y"])], [_x(())], [_y(())])


def nan_weights(value: float = np.nan) -> onnx.ModelProto:
    model = conv_net()
    weights = numpy_helper.to_array(model.graph.initializer[0]).copy()
    weights[0, 0, 0, 0] = value
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, "w"))
    return model


def string_input() -> onnx.ModelProto:
    return _graph([oh.make_node("Identity", ["x"], ["y"])],
                  [oh.make_tensor_value_info("x", TensorProto.STRING, [1])],
                  [oh.make_tensor_value_info("y", TensorProto.STRING, [1])])


@pytest.fixture
def work(tmp_path) -> Path:
    """A folder with good and bad files; ``out/`` is where outputs go."""
    _save(conv_net(), tmp_path / "model.onnx")
    _save(fp16_model(), tmp_path / "fp16.onnx")
    for name, build in (("cyclic", cyclic), ("dupnames", duplicate_names), ("ir99", ir_version_99),
                        ("opset99", opset_99), ("acme", custom_domain), ("scalar", scalar_input),
                        ("nan", nan_weights), ("inf", lambda: nan_weights(-np.inf)),
                        ("acme_shapeless", custom_domain_shapeless), ("strings", string_input)):
        _save(build(), tmp_path / f"{name}.onnx")
    (tmp_path / "notes.onnx").write_text("my notes, not a model\n")
    np.savez(tmp_path / "inputs.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    np.savez(tmp_path / "wrong_name.npz", images=np.zeros((1, 3, 8, 8), np.float32))
    (tmp_path / "truncated.npz").write_bytes((tmp_path / "inputs.npz").read_bytes()[:100])
    (tmp_path / "text.npz").write_text("x = 1, 2, 3\n")
    (tmp_path / "aipp.yaml").write_text("input_format: RGB888\nsource_size: [8, 8]\n")
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    (tmp_path / "keep.json").write_text('{"keep_fp32": {"nodes": ["no_such_node"]}}')
    (tmp_path / "not_torchscript.pt").write_bytes(b"PK\x03\x04 not a torchscript archive")
    np.save(tmp_path / "single.npy", np.zeros((1, 3, 8, 8), np.float32))
    recorded = make_recording([({"x": np.zeros((1, 3, 8, 8), np.float32)},
                                {"logits": np.zeros((1, 5), np.float32)})],
                              {"backend": "cpu", "build": "not-an-object"})
    recorded.save(tmp_path / "build_is_text.npz")
    (tmp_path / "out").mkdir()
    return tmp_path


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Path], list[str]]
    match: str  # regex that stderr must contain
    code: int = 2
    outputs: tuple[str, ...] = ("out",)  # paths (under the work folder) that must be unchanged


def m(name: str) -> Callable[[Path], str]:
    return lambda w: str(w / name)


def case(id: str, verb: str, *args, match: str, code: int = 2,
         outputs: tuple[str, ...] = ("out",)) -> Case:
    def argv(w: Path) -> list[str]:
        return [verb, *(a(w) if callable(a) else a for a in args)]
    return Case(id, argv, match, code, outputs)


OUT = m("out/result.onnx")
CASES = [
    # convert
    case("convert-missing", "convert", m("nope.onnx"), "-o", OUT, match=r"error\[file-not-found\]"),
    case("convert-text", "convert", m("notes.onnx"), "-o", OUT, match="is not an ONNX model"),
    case("convert-opset-99", "convert", m("model.onnx"), "-o", OUT, "--opset", "99",
         match="opset 99"),
    case("convert-output-is-dir", "convert", m("model.onnx"), "-o", m("out"),
         match="is a directory"),
    case("convert-factory-syntax", "convert", "broken_factory_syntax:build", "-o", OUT,
         "--input", "1,3,8,8", match="broken_factory_syntax.*SyntaxError"),
    case("convert-factory-raises", "convert", "broken_factory_raises:build", "-o", OUT,
         "--input", "1,3,8,8", match="broken_factory_raises.*raised.*disk on fire"),
    case("convert-factory-missing-module", "convert", "no_such_pkg.nets:build", "-o", OUT,
         "--input", "1,3,8,8", match="no_such_pkg"),
    case("convert-ir-99", "convert", m("ir99.onnx"), "-o", OUT, match="(IR version|ir_version) 99"),
    case("convert-cycle", "convert", m("cyclic.onnx"), "-o", OUT, match="cycle|topologically"),
    # optimize
    case("optimize-missing", "optimize", m("nope.onnx"), "-o", OUT,
         match="does not exist|no such file"),
    case("optimize-text", "optimize", m("notes.onnx"), "-o", OUT, match="is not an ONNX model"),
    case("optimize-report-is-output", "optimize", m("model.onnx"), "-o", OUT, "--report", OUT,
         match="the report and the model are the same file"),
    case("optimize-cycle", "optimize", m("cyclic.onnx"), "-o", OUT, match="cycle|topologically"),
    case("optimize-duplicate-names", "optimize", m("dupnames.onnx"), "-o", OUT,
         match="value 'a' is produced more than once"),
    case("optimize-ir-99", "optimize", m("ir99.onnx"), "-o", OUT,
         match="(IR version|ir_version) 99"),
    case("optimize-opset-99", "optimize", m("opset99.onnx"), "-o", OUT, match="opset 99"),
    case("optimize-unknown-rule", "optimize", m("model.onnx"), "-o", OUT, "--only", "fold-all",
         match="unknown rule id 'fold-all'"),
    case("optimize-unknown-target", "optimize", m("model.onnx"), "-o", OUT, "--target", "npu",
         match="unknown optimize target 'npu'"),
    case("optimize-custom-op-output-without-shape", "optimize", m("acme_shapeless.onnx"), "-o",
         OUT, match=r"error\[invalid-model\]: '.*acme_shapeless.onnx': graph output\(s\) y have "
                    r"no shape.*acme::Mystery"),
    case("optimize-no-output-dir", "optimize", m("model.onnx"), "-o", m("missing/o.onnx"),
         match="does not exist|no such file"),
    # verify
    case("verify-samples-0", "verify", m("model.onnx"), m("model.onnx"), "--samples", "0",
         match="samples must be at least 1, got 0"),
    case("verify-min-cosine-2", "verify", m("model.onnx"), m("model.onnx"), "--min-cosine", "2",
         match=r"min_cosine must be (in \[-1, 1\]|a finite number)"),
    case("verify-min-cosine-nan", "verify", m("model.onnx"), m("model.onnx"), "--min-cosine",
         "nan", match=r"min_cosine must be (in \[-1, 1\]|a finite number)"),
    case("verify-min-cosine-neg", "verify", m("model.onnx"), m("model.onnx"), "--min-cosine",
         "-3", match=r"min_cosine must be (in \[-1, 1\]|a finite number)"),
    case("verify-max-rel-l2-neg", "verify", m("model.onnx"), m("model.onnx"), "--max-rel-l2",
         "-1", match="max_rel_l2 must be at least 0"),
    case("verify-layer-alarm", "verify", m("model.onnx"), m("model.onnx"), "--layer-alarm", "5",
         match=r"layer_alarm must be in \[-1, 1\]"),
    case("verify-truncated-npz", "verify", m("model.onnx"), m("model.onnx"), "--inputs",
         m("truncated.npz"), match="cannot read inputs from .*truncated.npz"),
    case("verify-text-npz", "verify", m("model.onnx"), m("model.onnx"), "--inputs",
         m("text.npz"), match="not a numpy .npy/.npz file"),
    case("verify-wrong-input-name", "verify", m("model.onnx"), m("model.onnx"), "--inputs",
         m("wrong_name.npz"), match=r"missing input\(s\) 'x'"),
    case("verify-unknown-domain", "verify", m("acme.onnx"), m("acme.onnx"),
         match=r"error\[unknown-op-domain\]"),
    case("verify-candidate-missing", "verify", m("model.onnx"), m("nope.onnx"),
         match="does not exist|no such file"),
    case("verify-json-dir-missing", "verify", m("model.onnx"), m("model.onnx"), "--json",
         m("missing/r.json"), match="does not exist|no such file"),
    case("verify-task-on-classifier", "verify", m("model.onnx"), m("model.onnx"), "--task",
         "detect", match="detection parity needs"),
    case("verify-nan-model", "verify", m("nan.onnx"), m("nan.onnx"), code=1,
         match=r"note: output .logits. holds NaN.*FAILED"),
    case("verify-string-input", "verify", m("strings.onnx"), m("strings.onnx"),
         match="no random input is defined"),
    # quantize
    case("quantize-no-fp16", "quantize", m("model.onnx"), "-o", OUT, match="choose the target"),
    case("quantize-samples-0", "quantize", m("model.onnx"), "-o", OUT, "--fp16", "--samples", "0",
         match="samples must be at least 1, got 0"),
    case("quantize-int8-without-inputs", "quantize", m("model.onnx"), "-o", m("out/q"), "--int8",
         match="needs real inputs.*random noise"),
    case("quantize-int8-unknown-layer", "quantize", m("model.onnx"), "-o", m("out/q"), "--int8",
         "--inputs", m("inputs.npz"), "--keep-fp16", "conv9",
         match=r"error\[unknown-keep-fp16-layer\]"),
    case("quantize-int8-wrong-shape", "quantize", m("model.onnx"), "-o", m("out/q"), "--int8",
         "--inputs", m("wrong_name.npz"),
         match=r"missing input\(s\) 'x'; unknown input\(s\) 'images'"),
    case("compile-int8-not-a-folder", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/b"), "--int8", m("inputs.npz"), match=r"error\[bad-calibration-folder\]"),
    case("quantize-report-is-output", "quantize", m("model.onnx"), "-o", OUT, "--fp16",
         "--report", OUT, match="the report and the model are the same file"),
    case("quantize-truncated-npz", "quantize", m("model.onnx"), "-o", OUT, "--fp16", "--inputs",
         m("truncated.npz"), match="cannot read inputs"),
    case("quantize-min-cosine", "quantize", m("model.onnx"), "-o", OUT, "--fp16",
         "--min-cosine", "1.5", match=r"min_cosine must be (in \[-1, 1\]|a finite number)"),
    case("quantize-unknown-domain", "quantize", m("acme.onnx"), "-o", OUT, "--fp16",
         match=r"error\[unknown-op-domain\]"),
    case("quantize-keep-bogus", "quantize", m("model.onnx"), "-o", OUT, "--fp16", "--keep-fp32",
         "nothing_like_this", match="neither a node name nor an op type"),
    case("quantize-max-evaluations-0", "quantize", m("model.onnx"), "-o", OUT, "--fp16",
         "--max-evaluations", "0", match="at least one evaluation"),
    case("quantize-budget-0", "quantize", m("model.onnx"), "-o", OUT, "--fp16", "--budget", "0",
         match="positive time budget"),
    case("quantize-custom-op-output-without-shape", "quantize", m("acme_shapeless.onnx"), "-o",
         OUT, "--fp16", match=r"error\[invalid-model\]: .*graph output\(s\) y have no shape"),
    case("quantize-nan-weights", "quantize", m("nan.onnx"), "-o", OUT, "--fp16", "--report",
         m("out/r.json"), match=r"error\[non-finite-weights\]: 1 weight tensor\(s\) of the model "
                                r"hold NaN or Inf.*'w': 1 of 108 value\(s\)"),
    case("quantize-inf-weights", "quantize", m("inf.onnx"), "-o", OUT, "--fp16",
         match=r"error\[non-finite-weights\].*'w': 1 of 108"),
    case("quantize-fp16-model", "quantize", m("fp16.onnx"), "-o", OUT, "--fp16",
         match="already holds float16 tensors"),
    case("quantize-missing", "quantize", m("nope.onnx"), "-o", OUT, "--fp16",
         match="does not exist|no such file"),
    case("quantize-no-output-dir", "quantize", m("model.onnx"), "-o", m("missing/q.onnx"),
         "--fp16", match="does not exist|no such file"),
    # inspect
    case("inspect-missing", "inspect", m("nope.onnx"), match="does not exist|no such file"),
    case("inspect-text", "inspect", m("notes.onnx"), match="is not an ONNX model"),
    case("inspect-unknown-soc", "inspect", m("model.onnx"), "--target", "Ascend999",
         match="unknown soc 'Ascend999'"),
    # compile
    case("compile-opset-negative", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--opset", "-3", match="opset must be"),
    case("compile-opset-99", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--opset", "99", match="opset must be"),
    case("compile-binary-aipp", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--aipp", m("binary.yaml"), match="cannot read the AIPP spec"),
    case("compile-missing-aipp", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--aipp", m("nope.yaml"), match="cannot read the AIPP spec"),
    case("compile-dynamic-batch-scalar", "compile", m("scalar.onnx"), "--soc", "Ascend310B4",
         "-o", m("out/build"), "--dynamic-batch", "1,2", match="has no batch dimension"),
    case("compile-gear-zero", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--dynamic-batch", "0,2", match="gear sizes must be positive"),
    case("compile-gear-negative", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--dynamic-batch=-1,2", match="gear sizes must be positive"),
    case("compile-unknown-soc", "compile", m("model.onnx"), "--soc", "Ascend999", "-o",
         m("out/build"), match="unknown soc"),
    case("compile-keep-missing", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--keep-fp32-from", m("nope.json"),
         match="cannot read the precision report"),
    case("compile-keep-unknown-node", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--keep-fp32-from", m("keep.json"), match="no_such_node"),
    case("compile-nan-weights", "compile", m("nan.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), match="NaN"),
    case("compile-parent-missing", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("missing/build"), match="does not exist|no such file"),
    case("compile-atc-timeout", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), "--atc-timeout", "-1", match="atc_timeout must be positive"),
    case("compile-force-onto-a-file", "compile", m("model.onnx"), "--soc", "Ascend310B4", "-o",
         m("fp16.onnx"), "--force", match="is a file, not a build directory(?!.*pass --force)",
         outputs=("fp16.onnx",)),
    case("compile-force-onto-the-model", "compile", m("model.onnx"), "--soc", "Ascend310B4",
         "-o", m("model.onnx"), "--force", match=r"error\[output-is-input\]: the BUILD_DIR "
         ".*model.onnx' is the model", outputs=("model.onnx",)),
    case("compile-existing-without-force", "compile", m("model.onnx"), "--soc", "Ascend310B4",
         "-o", m("out"), match="already exists.*pass --force"),
    case("compile-unknown-domain", "compile", m("acme.onnx"), "--soc", "Ascend310B4", "-o",
         m("out/build"), match="acme"),
    # ops
    case("ops-unknown-soc", "ops", "build", "--soc", "Ascend999", "-o", m("out/opp"),
         match="unknown soc"),
    case("ops-parent-missing", "ops", "build", "--soc", "Ascend310B4", "-o",
         m("missing/opp"), match="does not exist|no such file"),
    case("ops-unknown-op", "ops", "build", "--soc", "Ascend310B4", "-o", m("out/opp"),
         "--ops", "Gelu", match="Gelu"),
    # run
    case("run-threads-negative", "run", m("model.onnx"), "--backend", "cpu", "--threads", "-5",
         match="threads must be at least 1"),
    case("run-batch-negative", "run", m("model.onnx"), "--backend", "cpu", "--batch", "-3",
         match="batch must be at least 1"),
    case("run-truncated-npz", "run", m("model.onnx"), "--backend", "cpu", "--inputs",
         m("truncated.npz"), match="cannot read inputs"),
    case("run-unknown-backend", "run", m("model.onnx"), "--backend", "gpu",
         match="unknown backend"),
    case("run-save-dir-missing", "run", m("model.onnx"), "--backend", "cpu", "--save",
         m("missing/o.npz"), match="does not exist|no such file"),
    case("run-save-is-dir", "run", m("model.onnx"), "--backend", "cpu", "--save", m("out"),
         match="is a directory"),
    case("run-device-id-negative", "run", m("model.onnx"), "--backend", "cpu", "--device-id",
         "-1", match="device_id must be at least 0"),
    case("run-missing-model", "run", m("nope.onnx"), match="does not exist|no such file"),
    case("run-inputs-missing", "run", m("model.onnx"), "--backend", "cpu", "--inputs",
         m("nope.npz"), match="no such inputs file"),
    case("run-text-model", "run", m("notes.onnx"), "--backend", "cpu",
         match="is not an ONNX model"),
    case("verify-against-an-npy", "verify", "--against", m("single.npy"), m("model.onnx"),
         "--backend", "cpu", match=r"error\[bad-recording\]: .*single.npy' is not an edgefuse "
                                   r"recording: .*single array \(an .npy\)"),
    case("verify-against-build-of-the-wrong-type", "verify", "--against",
         m("build_is_text.npz"), m("model.onnx"), "--backend", "cpu",
         match=r"error\[bad-recording\]: .*'build' in its meta is 'not-an-object', not an object"),
    case("run-string-input", "run", m("strings.onnx"), "--backend", "cpu",
         match=r"tensor\(string\), which edgefuse sessions do not support"),
    # bench
    case("bench-iterations-0", "bench", m("model.onnx"), "--backend", "cpu", "--iterations",
         "0", match="must be positive"),
    case("bench-seconds-negative", "bench", m("model.onnx"), "--backend", "cpu", "--seconds",
         "-1", match="must be positive"),
    case("bench-warmup-negative", "bench", m("model.onnx"), "--backend", "cpu", "--warmup",
         "-1", match="warmup >= 0"),
    case("bench-batch-negative", "bench", m("model.onnx"), "--backend", "cpu", "--batch", "-3",
         match="batch must be at least 1"),
    case("bench-threads-zero", "bench", m("model.onnx"), "--backend", "cpu", "--threads", "0",
         match="threads must be at least 1"),
    case("bench-json-dir-missing", "bench", m("model.onnx"), "--backend", "cpu", "--json",
         m("missing/b.json"), "--iterations", "1", match="does not exist|no such file"),
    case("bench-not-torchscript", "bench", m("model.onnx"), "--backend", "cpu", "--torch",
         m("not_torchscript.pt"), "--iterations", "1", match="not a TorchScript"),
    case("bench-missing", "bench", m("nope.onnx"), match="does not exist|no such file"),
    # doctor, demo, the command itself
    case("doctor-json-dir-missing", "doctor", "--json", m("missing/d.json"),
         match="does not exist|no such file"),
    case("demo-workdir-is-a-file", "demo", "--workdir", m("model.onnx"),
         match="is a file, not a folder", outputs=("model.onnx",)),
    case("demo-frames-zero", "demo", "--max-frames", "0", match="max-frames must be at least 1"),
    case("unknown-verb", "frobnicate", match="invalid choice"),
]


def _snapshot(root: Path, names: tuple[str, ...]) -> dict[str, bytes | None]:
    """Every file under the named paths, with its bytes (None for a folder)."""
    found: dict[str, bytes | None] = {}
    for name in names:
        path = root / name
        if path.is_file():
            found[name] = path.read_bytes()
        elif path.is_dir():
            found[name] = None
            for child in sorted(path.rglob("*")):
                found[str(child.relative_to(root))] = child.read_bytes() if child.is_file() \
                    else None
    return found


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """Two factory modules a user could name, one with a syntax error, one that raises."""
    (tmp_path / "broken_factory_syntax.py").write_text("def build(:\n    pass\n")
    (tmp_path / "broken_factory_raises.py").write_text("raise OSError('disk on fire')\n")
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_cleanly(bad, work, factories, capsys, monkeypatch):
    monkeypatch.setenv("PATH", os.defpath)  # no atc here, whatever the machine has
    before = _snapshot(work, bad.outputs)
    try:
        code = main(bad.argv(work))
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == bad.code, captured.err
    assert "Traceback" not in captured.err
    assert captured.err.count("error[") <= 1, captured.err  # no error nested in an error
    assert _matches(bad.match, captured.err + captured.out), captured.err
    assert _snapshot(work, bad.outputs) == before
    leftovers = [p.name for p in work.rglob(".*") if p.name.startswith((".result", ".build"))]
    assert leftovers == []


def _matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.S) is not None


def test_a_bare_edgefuse_prints_usage_to_stderr_and_exits_2(capsys):
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: edgefuse" in captured.err and "error[bad-usage]: no command given" in \
        captured.err


# ---- permissions: as a user without root's override ---------------------------------------


PERMISSION_CASES = [
    ("convert-unreadable-model", ["convert", "{locked}/model.onnx", "-o", "{out}/o.onnx"],
     "cannot read"),
    ("optimize-unreadable-model", ["optimize", "{locked}/model.onnx", "-o", "{out}/o.onnx"],
     "cannot read"),
    ("verify-unreadable-model", ["verify", "{locked}/model.onnx", "{work}/model.onnx"],
     "cannot read"),
    ("inspect-unreadable-model", ["inspect", "{locked}/model.onnx"], "cannot read"),
    ("run-unreadable-model", ["run", "{locked}/model.onnx", "--backend", "cpu"],
     "cannot read"),
    ("convert-unwritable-output", ["convert", "{work}/model.onnx", "-o", "{readonly}/o.onnx"],
     "cannot write"),
    ("optimize-unwritable-output", ["optimize", "{work}/model.onnx", "-o", "{readonly}/o.onnx"],
     "cannot write"),
    ("quantize-unwritable-output", ["quantize", "{work}/model.onnx", "-o", "{readonly}/o.onnx",
                                    "--fp16", "--keep-fp32", "none"], "cannot write"),
    ("compile-unwritable-output", ["compile", "{work}/model.onnx", "--soc", "Ascend310B4", "-o",
                                   "{readonly}/build"], "cannot write"),
    ("run-unwritable-save", ["run", "{work}/model.onnx", "--backend", "cpu", "--save",
                             "{readonly}/o.npz"], "cannot write"),
    ("verify-unwritable-json", ["verify", "{work}/model.onnx", "{work}/model.onnx", "--json",
                                "{readonly}/r.json"], "cannot write"),
    ("demo-unwritable-workdir", ["demo", "--workdir", "{readonly}/demo"],
     "cannot write"),
    ("demo-read-only-workdir", ["demo", "--workdir", "{readonly}"], "cannot write in"),
    ("ops-unwritable-parent", ["ops", "build", "--soc", "Ascend310B4", "-o", "{readonly}/opp"],
     "cannot write in"),
]


@pytest.mark.parametrize(("argv", "match"), [c[1:] for c in PERMISSION_CASES],
                         ids=[c[0] for c in PERMISSION_CASES])
def test_permission_problems_are_user_errors(argv, match, tmp_path):
    prefix = without_dac_override()
    work = tmp_path / "work"
    work.mkdir()
    _save(conv_net(), work / "model.onnx")
    locked, readonly, out = work / "locked", work / "readonly", work / "out"
    for folder in (locked, readonly, out):
        folder.mkdir()
    _save(conv_net(), locked / "model.onnx")
    (locked / "model.onnx").chmod(0o000)
    readonly.chmod(0o555)
    filled = [a.format(work=work, locked=locked, readonly=readonly, out=out) for a in argv]
    done = subprocess.run([*prefix, sys.executable, "-m", "edgefuse", *filled], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PATH": os.defpath})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert match in done.stderr, done.stderr
    assert list(readonly.iterdir()) == [] and list(out.iterdir()) == []
