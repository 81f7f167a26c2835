"""Model metadata as exporters and strangers write it: edgefuse's own app info
(``metadata_props["edgefuse.app"]``), the record Ultralytics writes into its exports, the
``infer_cfg.yml`` PaddleDetection writes beside its models, and a YOLOX export (no record)
carrying whatever props: every mutation reads, or is refused with ``error[...]``, through
``app_info_of`` (what the apps and the detector call when a model opens)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from edgefuse.model_source import resolve_source
from edgefuse.vision.model.adapter import app_info_of
from tests.properties.strangers import (
    PROPERTIES,
    SCALARS,
    VALUES,
    assert_clean_exit,
    cli,
    mutated,
    outcome,
)
from tests.vision.models import constant_model

pytestmark = pytest.mark.ort

EXPORTERS = Path(__file__).resolve().parents[1] / "vision" / "detect" / "exporters"
# What Ultralytics 8.4.190 writes (engine/exporter.py, self.metadata), for a 3-class detector.
ULTRALYTICS = {"description": "Ultralytics YOLOv8n model trained on coco.yaml",
               "author": "Ultralytics", "version": "8.4.190", "license": "AGPL-3.0 License",
               "stride": "32", "task": "detect", "head": "Detect", "batch": "1",
               "imgsz": "[64, 64]", "names": "{0: 'person', 1: 'bicycle', 2: 'car'}",
               "args": "{'batch': 1, 'simplify': True}", "channels": "3", "end2end": "False"}
APP_INFO = {"task": "detect", "classes": ["square", "circle"],
            "preprocess": {"size": [64, 64], "resize": "letterbox", "pad_value": 114,
                           "color": "RGB", "scale": 1 / 255, "mean": [0, 0, 0],
                           "std": [1, 1, 1]},
            "postprocess": {"layout": "yolov8", "conf": 0.25, "iou": 0.45, "max_det": 300}}
PADDLE = yaml.safe_load((EXPORTERS / "paddle" / "picodet_boxes" / "infer_cfg.yml").read_text())


def _detector() -> onnx.ModelProto:
    output = np.zeros((1, 7, 64), np.float32)
    output[0, :4, 0] = [32, 32, 10, 10]
    return constant_model(output, size=64)


DETECTOR = _detector()
YOLOX = onnx.load(str(EXPORTERS / "yolox_nano_tiny.onnx"))


def _read(model: onnx.ModelProto, props: dict[str, str], infer_cfg: str | None = None) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        carrier = onnx.ModelProto()
        carrier.CopyFrom(model)
        del carrier.metadata_props[:]
        onnx.helper.set_model_props(carrier, props)
        onnx.save(carrier, str(path))
        if infer_cfg is not None:
            (Path(folder) / "infer_cfg.yml").write_text(infer_cfg, encoding="utf-8")
        return outcome(lambda: app_info_of(resolve_source(path)))


def _as_props(data) -> dict[str, str]:
    """metadata_props hold strings: anything else as the text an exporter might write."""
    if not isinstance(data, dict):
        return {"names": str(data)}
    return {str(key): value if isinstance(value, str) else repr(value)
            for key, value in data.items()}


def test_the_bases_read():
    assert _read(DETECTOR, ULTRALYTICS) == "ok"
    assert _read(DETECTOR, {"edgefuse.app": json.dumps(APP_INFO)}) == "ok"
    assert _read(DETECTOR, {}, yaml.safe_dump(PADDLE)) == "ok"
    assert _read(YOLOX, {}) == "ok"


NAMES = st.dictionaries(st.integers(-3, 100) | st.text(max_size=4), SCALARS, max_size=5).map(repr)


@PROPERTIES
@given(mutated(ULTRALYTICS).map(_as_props), NAMES)
@example({**ULTRALYTICS, "imgsz": "[64]"}, None)
@example({**ULTRALYTICS, "names": "{0: 'a', 0: 'b'}"}, None)
def test_any_ultralytics_record_reads_or_is_refused_clearly(props, names):
    if names is not None and "names" in props and len(props) % 2:
        props = {**props, "names": names}
    _read(DETECTOR, props)


@PROPERTIES
@given(mutated(APP_INFO), st.booleans())
def test_any_edgefuse_app_info_reads_or_is_refused_clearly(info, as_text):
    text = json.dumps(info, allow_nan=True) if not as_text else str(info)
    _read(DETECTOR, {"edgefuse.app": text})


@PROPERTIES
@given(mutated(PADDLE))
def test_any_paddle_infer_cfg_reads_or_is_refused_clearly(cfg):
    _read(DETECTOR, {}, yaml.safe_dump(cfg, allow_unicode=True))


@PROPERTIES
@given(st.dictionaries(st.sampled_from(["author", "description", "names", "task", "imgsz",
                                        "head", "end2end", "edgefuse.app"]) | st.text(max_size=8),
                       VALUES.map(str) | st.text(max_size=40), max_size=6))
@example({"author": "Ultralytics", "names": "{}"})
@example({"description": "Ultralytics", "names": "[]"})
def test_any_props_on_a_yolox_export_read_or_are_refused_clearly(props):
    _read(YOLOX, props)


def test_a_damaged_record_exits_2_from_the_cli(tmp_path):
    model = onnx.ModelProto()
    model.CopyFrom(DETECTOR)
    onnx.helper.set_model_props(model, {**ULTRALYTICS, "names": "{0: 'person', 1:"})
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    shutil.copy(Path(__file__).resolve().parents[1] / "vision" / "photos" / "coffee.jpg",
                tmp_path / "coffee.jpg")
    done = cli("detect", "--model", str(path), "--source", str(tmp_path / "coffee.jpg"),
               "--backend", "cpu")
    assert_clean_exit(done)
    assert done.returncode == 2 and "Ultralytics metadata_props" in done.stderr, done.stderr
