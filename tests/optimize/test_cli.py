"""``edgefuse optimize``: files written on success, a diagnostic and nothing written on error."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.cli.main import main
from edgefuse.reference.onnx_runner import run_onnx
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


# ---- --yolo-head: the device-side YOLO decode + NMS -------------------------------------------


@pytest.fixture
def yolov8_file(tmp_path):
    """A stand-in YOLOv8 head: Conv features -> predictions [1, 4 + 3 classes, 64]."""
    rng = np.random.default_rng(1)
    model = make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv"),
         node("Reshape", ["c", "shape"], ["predictions"], name="flatten")],
        {"x": [1, 2, 8, 8]},
        ["predictions"],
        {"w": random(rng, 7, 2, 1, 1), "shape": np.array([1, 7, 64], np.int64)},
    )
    path = tmp_path / "yolov8.onnx"
    onnx.save(model, path)
    return path


def test_yolo_head_appends_the_op_with_the_thresholds(yolov8_file, tmp_path, capsys):
    out = tmp_path / "det.onnx"
    assert main(["optimize", str(yolov8_file), "-o", str(out), "--target", "Ascend310B4",
                 "--yolo-head", "conf=0.3, iou=0.5,max_det=20,max_per_class=5"]) == 0
    assert "appended edgefuse::YoloHead (conf=0.3, iou=0.5, max_det=20, max_per_class=5)" in (
        capsys.readouterr().out)
    model = onnx.load(out)
    (head,) = [n for n in model.graph.node if n.op_type == "YoloHead"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in head.attribute}
    assert attrs["num_classes"] == 3 and attrs["max_detections"] == 20
    assert attrs["score_threshold"] == pytest.approx(0.3) and attrs["max_per_class"] == 5
    assert [o.name for o in model.graph.output] == ["boxes", "scores", "classes",
                                                    "num_detections"]
    x = np.random.default_rng(2).standard_normal((1, 2, 8, 8)).astype(np.float32)
    raw = run_onnx(onnx.load(yolov8_file), {"x": x})["predictions"]
    expected = YOLO_HEAD.reference([raw], num_classes=3, score_threshold=0.3, iou_threshold=0.5,
                                   max_detections=20, max_per_class=5)
    got = run_onnx(model, {"x": x})
    np.testing.assert_allclose(got["boxes"], expected[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got["num_detections"], expected[3])


def test_yolo_head_alone_takes_the_predict_defaults(yolov8_file, tmp_path):
    out = tmp_path / "det.onnx"
    assert main(["optimize", str(yolov8_file), "-o", str(out), "--yolo-head"]) == 0
    (head,) = [n for n in onnx.load(out).graph.node if n.op_type == "YoloHead"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in head.attribute}
    assert (attrs["score_threshold"], attrs["max_detections"]) == (pytest.approx(0.25), 300)


@pytest.mark.parametrize(("value", "message"), [
    ("conf=2", "conf must be a number from 0 to 1, got '2'"),
    ("conf=high", "conf must be a number from 0 to 1, got 'high'"),
    ("max_det=0", "max_det must be an integer >= 1, got '0'"),
    ("max_det=2.5", "max_det must be an integer >= 1, got '2.5'"),
    ("thresh=0.3", "unknown key thresh"),
    ("conf=0.3,conf=0.4", "conf is given twice"),
    ("conf", "'conf' is not KEY=VALUE"),
    ("layout=v8", "layout must be one of auto, yolov5, yolov8"),
])
def test_a_bad_yolo_head_option_exits_2_before_anything_is_written(yolov8_file, tmp_path,
                                                                   capsys, value, message):
    out = tmp_path / "det.onnx"
    assert main(["optimize", str(yolov8_file), "-o", str(out), "--yolo-head", value]) == 2
    err = capsys.readouterr().err
    assert f"error[bad-yolo-head-option]: --yolo-head: {message}" in err
    assert "hint:" in err and "Traceback" not in err and not out.exists()
