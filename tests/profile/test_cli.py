"""`edgefuse profile` end to end, and its bad input: exit 2, a clear message, no traceback and
nothing written (the trace and the JSON are checked before the model runs)."""

from __future__ import annotations

import json
import re

import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from edgefuse.cli.main import main
from tests.profile.models import saved_pair

pytestmark = pytest.mark.ort


@pytest.fixture
def pair(tmp_path):
    return saved_pair(tmp_path)


def _custom_op_model(path):
    graph = oh.make_graph([oh.make_node("Frobnicate", ["x"], ["y"], domain="acme")], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17),
                                                oh.make_opsetid("acme", 1)])
    onnx.save(model, str(path))
    return path


def test_profile_compare_prints_both_tables_the_savings_and_writes_trace_and_json(
        pair, tmp_path, capsys):
    before, after = pair
    trace, table = tmp_path / "trace.json", tmp_path / "profile.json"
    code = main(["profile", str(before), "--compare", str(after), "--runs", "2", "--warmup", "1",
                 "--soc", "Ascend310B4", "--trace", str(trace), "--json", str(table)])
    out = capsys.readouterr().out
    assert code == 0
    assert "LOWER BOUND" in out and "time saved by" in out and "fold-bn-into-conv" in out
    document = json.loads(table.read_text())
    assert len(document["profiles"]) == 2 and "comparison" in document
    processes = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
                 if e.get("name") == "process_name"}
    assert len(processes) == 2


@pytest.mark.parametrize(("extra", "match"), [
    (["--soc", "Ascend999"], r"error\[unknown-soc\]: unknown soc 'Ascend999'"),
    (["--soc", "Ascend310P3"], r"error\[no-peak-figures\]: no published peak figures"),
    (["--trace", "{tmp}/missing/trace.json"], r"error\[bad-output-path\].*does not exist"),
    (["--json", "{tmp}/missing/profile.json"], r"error\[bad-output-path\].*does not exist"),
    (["--backend", "cpu,sim"], r"error\[bad-usage\].*invalid choice"),
    (["--backend", "acl"], r"msprof is not on PATH|not a BUILD_DIR"),
    (["--runs", "0"], r"runs"),
])
def test_bad_input_exits_2_and_writes_nothing(pair, tmp_path, capsys, monkeypatch, extra, match):
    monkeypatch.setenv("PATH", str(tmp_path))  # no msprof
    before, _ = pair
    argv = ["profile", str(before), "--trace", str(tmp_path / "t.json"),
            *[a.format(tmp=tmp_path) for a in extra]]
    files = sorted(p.name for p in tmp_path.iterdir())
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert re.search(match, err, re.S), err
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_a_model_the_backend_cannot_run_exits_2_and_writes_nothing(tmp_path, capsys):
    model = _custom_op_model(tmp_path / "custom.onnx")
    code = main(["profile", str(model), "--trace", str(tmp_path / "t.json")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "error[" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["custom.onnx"]


def test_a_backend_missing_here_exits_2(pair, tmp_path, capsys):
    import onnxruntime  # noqa: PLC0415 - only to skip where a GPU build is installed

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    code = main(["profile", str(pair[0]), "--backend", "cuda"])
    assert code == 2
    assert "cuda" in capsys.readouterr().err


def test_bench_profile_profiles_on_benchs_backend_and_sets_the_totals_side_by_side(
        pair, tmp_path, capsys):
    report = tmp_path / "bench.json"
    code = main(["bench", str(pair[0]), "--backend", "cpu", "--iterations", "5", "--warmup", "1",
                 "--no-onnxruntime", "--profile", "--soc", "Ascend310B4", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert "profile vs bench:" in out and "LOWER BOUND" in out
    document = json.loads(report.read_text())
    assert document["profile"]["bench_p50_ms"] == document["results"]["edgefuse/cpu"]["p50_ms"]
    assert document["profile"]["soc"] == "Ascend310B4"


def test_bench_soc_without_profile_is_a_usage_error(pair, capsys):
    assert main(["bench", str(pair[0]), "--backend", "cpu", "--soc", "Ascend310B4"]) == 2
    assert "--soc is for the profile's floor" in capsys.readouterr().err
