"""The camera apps' default models: a YOLOv8 and a DeepLabV3+ at reduced width, trained on shapes.

Why trained models in a catalogue of seeded ones: an app that draws boxes or masks needs weights
that find something, and no weights can be downloaded here. Both models are trained by
``python -m training.shapes`` (repository root) on scenes from
``edgefuse.vision.scenes.shapes``; their fp16 state_dicts ship as package data next to
``shapes.json``, the record of how they were made (seeds, command, steps, held-out metrics, wall
time) and of each model's application info (task, class names, preprocessing, postprocessing) as
it was trained.

Why the application info is read from the record and not rebuilt here: it must describe the
weights that ship, so it is written once, by the run that made them. This module imports neither
torch nor the scene generator; the architecture hyper-parameters below are what the builders in
``yolov8.py`` and ``deeplabv3plus.py`` and the training read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgefuse.errors import ModelLoadError, Ref
from edgefuse.models._trained import WEIGHTS_DIR
from edgefuse.preprocess import IMAGENET_MEAN, IMAGENET_STD

NUM_CLASSES = 6  # len(edgefuse.vision.scenes.shapes.CLASSES); the record names them
DETECTOR_INPUT = (256, 256)
DETECTOR_DEPTH, DETECTOR_WIDTH = 0.33, 0.125
SEGMENTER_INPUT = (256, 256)
SEGMENTER_WIDTH = 0.35
SEGMENTER_RATES = (3, 6, 9)  # output stride 16 on 256 pixels is a 16x16 map: 6/12/18 reach padding
SEGMENTER_ASPP_CHANNELS, SEGMENTER_PROJECT_CHANNELS = 64, 16

RECORD_FILE = WEIGHTS_DIR / "shapes.json"
DETECTOR, SEGMENTER = "shapes_yolov8", "shapes_deeplabv3plus"
INSTANCE = "shapes_yolov8_seg"  # the detector with YOLOv8-seg's mask branch (yolov8_seg.py)



def detector_preprocess() -> dict[str, Any]:
    """Ultralytics' letterbox: keep aspect, pad with 114 centred, RGB, pixels / 255."""
    return {
        "size": list(DETECTOR_INPUT),
        "resize": "letterbox",
        "pad_value": 114,
        "center": True,
        "color": "RGB",
        "scale": 1.0 / 255.0,
        "mean": [0.0, 0.0, 0.0],
        "std": [1.0, 1.0, 1.0],
        "layout": "NCHW",
        "dtype": "float32",
    }


def segmenter_preprocess() -> dict[str, Any]:
    """A plain resize to the input size, RGB, pixels / 255, then ImageNet mean and std."""
    return {
        "size": list(SEGMENTER_INPUT),
        "resize": "stretch",
        "pad_value": 0,
        "center": False,
        "color": "RGB",
        "scale": 1.0 / 255.0,
        "mean": list(IMAGENET_MEAN),
        "std": list(IMAGENET_STD),
        "layout": "NCHW",
        "dtype": "float32",
    }


def app_info(name: str, classes: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The application info of ``name`` for ``classes``: what the training records."""
    if name == DETECTOR:
        return {
            "task": "detect",
            "classes": list(classes),
            "preprocess": detector_preprocess(),
            "postprocess": {"layout": "yolov8", "conf": 0.25, "iou": 0.45, "max_det": 300},
        }
    if name == INSTANCE:
        return {
            "task": "segment",
            "classes": list(classes),
            "preprocess": detector_preprocess(),
            "postprocess": {"layout": "yolov8_seg", "conf": 0.25, "iou": 0.45, "max_det": 300},
        }
    if name == SEGMENTER:
        return {
            "task": "segment",
            "classes": ["background", *classes],
            "preprocess": segmenter_preprocess(),
            "postprocess": {"layout": "seg_logits", "background": 0},
        }
    raise ValueError(f"no trained shapes model called {name!r}")


def read_record(path: Path = RECORD_FILE) -> dict[str, Any]:
    """The training record ``shapes.json``; a missing or broken one is an installation problem."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"cannot read the shapes models' training record '{path}': {exc}",
            hint="reinstall edgefuse, or train the models: python -m training.shapes --task all",
            reference=Ref.MISSING_TRAINED_WEIGHTS,
        ) from None


def recorded_app_info(name: str) -> dict[str, Any]:
    """The application info recorded with the shipped weights of ``name``."""
    models = read_record().get("models", {})
    if name not in models:
        raise ModelLoadError(
            f"the training record '{RECORD_FILE}' has no entry for '{name}'",
            hint=f"train it: python -m training.shapes --task "
            f"{ {DETECTOR: 'detect', INSTANCE: 'instance'}.get(name, 'segment')}",
            reference=Ref.MISSING_TRAINED_WEIGHTS,
        )
    return models[name]["app"]


def detector_app_info() -> dict[str, Any]:
    """Application info of ``shapes_yolov8`` (contracts: task, classes, pre/postprocess)."""
    return recorded_app_info(DETECTOR)


def instance_app_info() -> dict[str, Any]:
    """Application info of ``shapes_yolov8_seg`` (layout ``yolov8_seg``, the detector's input)."""
    return recorded_app_info(INSTANCE)


def segmenter_app_info() -> dict[str, Any]:
    """Application info of ``shapes_deeplabv3plus`` (class 0 is the background)."""
    return recorded_app_info(SEGMENTER)
