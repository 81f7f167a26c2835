"""Fixtures the app tests share."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from edgefuse.model_info import AppInfo, embed
from tests.vision.models import constant_model, yolov8_output


@pytest.fixture
def detector_onnx(tmp_path) -> Path:
    info = AppInfo.from_dict({"task": "detect", "classes": ["circle", "square"],
                              "postprocess": {"layout": "yolov8"}})
    path = tmp_path / "detector.onnx"
    onnx.save(embed(constant_model(yolov8_output()), info), path)
    return path
