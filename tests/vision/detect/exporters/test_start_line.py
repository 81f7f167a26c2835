"""The detection app's start line says who decided the preprocessing: the exporter's record,
the family told by the graph, or a default that is a guess."""

from __future__ import annotations

import shutil

import onnx
import pytest

from edgefuse.cli.main import main
from edgefuse.model_info import AppInfo, embed
from tests.vision.detect.exporters.compare import HERE, PHOTOS
from tests.vision.models import constant_model, yolov8_output

pytestmark = pytest.mark.ort

QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]


@pytest.fixture
def photos(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for path in PHOTOS[:2]:
        shutil.copy(path, folder / path.name)
    return folder


def start_line(capsys, model, source) -> str:
    assert main(["detect", "--model", str(model), "--source", str(source), *QUIET]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if " on cpu; " in line]
    assert len(lines) == 1
    return lines[0]


def test_a_raw_yolox_head_says_yoloxs_preprocessing(capsys, photos):
    line = start_line(capsys, HERE / "yolox_nano_tiny.onnx", photos)
    assert line.endswith("; preprocess: YOLOX's, told by its raw YOLOX head")


def test_infer_cfg_beside_the_model_says_so(capsys, photos):
    line = start_line(capsys, HERE / "paddle" / "ppyoloe_plus" / "model.onnx", photos)
    assert line.endswith("; preprocess: infer_cfg.yml beside the model (PaddleDetection, "
                         "arch YOLO)")


def test_nothing_to_tell_the_family_is_called_a_guess(capsys, photos, tmp_path):
    """A YOLOv8-shaped model without Ultralytics' metadata: the default, said to be a guess."""
    path = tmp_path / "v8.onnx"
    onnx.save(constant_model(yolov8_output()), path)
    line = start_line(capsys, path, photos)
    assert "preprocess: Ultralytics' defaults" in line and "a guess" in line
    with_info = tmp_path / "v8_info.onnx"
    info = AppInfo.from_dict({"task": "detect", "classes": ["a", "b"],
                              "preprocess": {"size": [32, 32]}})
    onnx.save(embed(constant_model(yolov8_output()), info), with_info)
    assert start_line(capsys, with_info, photos).endswith(
        "; preprocess: the model's app info")
