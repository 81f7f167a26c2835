"""``edgefuse optimize``: files written on success, a diagnostic and nothing written on error."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from edgefuse.cli.main import main
from tests.optimize.graphs import assert_same_outputs, bn_node, bn_params, make_model, node, random

pytestmark = pytest.mark.ort


@pytest.fixture
def model_file(tmp_path):
    rng = np.random.default_rng(0)
    model = make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "y")],
        {"x": [1, 2, 5, 5]},
        ["y"],
        {"w": random(rng, 3, 2, 3, 3), **bn_params(rng, 3)},
    )
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    return path


def test_optimize_writes_the_model_and_the_report(model_file, tmp_path, capsys):
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    assert main(["optimize", str(model_file), "-o", str(out), "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "fold-bn-into-conv" in printed and f"wrote {out}" in printed
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Conv"]
    assert json.loads(report.read_text())["nodes_after"] == 1
    assert_same_outputs(onnx.load(model_file), onnx.load(out))


def test_only_and_skip_take_comma_separated_ids(model_file, tmp_path):
    report = tmp_path / "r.json"
    argv = ["optimize", str(model_file), "-o", str(tmp_path / "out.onnx"), "--report", str(report)]
    assert main([*argv, "--skip", "fold-bn-into-conv, bn-to-affine"]) == 0
    ids = {rule["id"] for rule in json.loads(report.read_text())["rules"]}
    assert "fold-bn-into-conv" not in ids and "bn-to-affine" not in ids
    assert main([*argv, "--only", "fold-bn-into-conv,remove-dropout"]) == 0
    ids = [rule["id"] for rule in json.loads(report.read_text())["rules"]]
    assert ids == ["remove-dropout", "fold-bn-into-conv"]


def test_a_file_that_is_not_onnx_exits_2_and_leaves_nothing_behind(tmp_path, capsys):
    bad = tmp_path / "in.onnx"
    bad.write_text("this is not a model\n")
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    assert main(["optimize", str(bad), "-o", str(out), "--report", str(report)]) == 2
    err = capsys.readouterr().err
    assert "error[not-onnx]" in err and "is not an ONNX model" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_a_missing_input_exits_2(tmp_path, capsys):
    assert main(["optimize", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_rule_id_exits_2_before_writing(model_file, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(model_file), "-o", str(out), "--only", "fold-bn"]) == 2
    assert "error[unknown-rule]: unknown rule id 'fold-bn'" in capsys.readouterr().err
    assert not out.exists()


def test_an_output_directory_that_does_not_exist_exits_2(model_file, tmp_path, capsys):
    out = tmp_path / "missing" / "out.onnx"
    assert (
        main(["optimize", str(model_file), "-o", str(out), "--report", str(tmp_path / "r.json")])
        == 2
    )
    assert "error[bad-output-path]" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_a_bad_report_path_exits_2_before_the_model_is_written(model_file, tmp_path, capsys):
    out, report = tmp_path / "out.onnx", tmp_path / "missing" / "r.json"
    assert main(["optimize", str(model_file), "-o", str(out), "--report", str(report)]) == 2
    assert "error[bad-output-path]" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]
