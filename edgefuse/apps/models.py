"""``--model``: a plain ONNX file, a BUILD_DIR, or a catalogue name converted on the fly.

Why catalogue names: ``edgefuse detect --model yolov8n:tiny --source clip.mp4`` tries the app
with no file at hand (random weights, so the boxes mean nothing; the pipeline, the decode and the
frame rate are real). Conversion needs PyTorch; without it the error names the extra to install.
A catalogue model's app info is written here from its catalogue entry: the decode layout, the
input size, Ultralytics' letterbox for detectors, ImageNet normalisation for DeepLab.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgefuse._deps import require_torch
from edgefuse.convert import convert
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import AppInfo, Postprocess
from edgefuse.models.catalogue import CATALOGUE, VARIANTS, ModelEntry
from edgefuse.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from edgefuse.runtime import ModelSource, resolve_source
from edgefuse.vision.model.adapter import app_info_of

_LAYOUT_OF_CATALOGUE = {"yolov3": "yolov5", "yolov5s": "yolov5", "yolov8n": "yolov8"}


def resolve_model(spec: str) -> tuple[ModelSource, AppInfo | None]:
    """The model ``spec`` names and the app info it carries (None: it carries none)."""
    path = Path(spec)
    if path.exists():
        source = resolve_source(path)
        return source, app_info_of(source)
    name, _, variant = spec.partition(":")
    if name not in CATALOGUE:
        raise InputError(
            f"'{spec}' is not a file, a BUILD_DIR or a catalogue model",
            hint="give an .onnx file, a directory from `edgefuse compile`, or one of: "
                 + ", ".join(f"{n}[:tiny]" for n in CATALOGUE),
            reference=Ref.MODEL_NOT_FOUND,
        )
    variant = variant or "full"
    if variant not in VARIANTS:
        raise InputError(f"unknown variant '{variant}' of {name}",
                         hint=f"one of: {', '.join(VARIANTS)}", reference=Ref.MODEL_NOT_FOUND)
    entry = CATALOGUE[name]
    require_torch(f"converting the catalogue model '{name}' for the app")
    input_shape, _ = entry.shapes(variant)
    model = convert(entry.build(variant), inputs=input_shape)
    return ModelSource(f"{name}:{variant}", model, None, None), catalogue_info(entry, variant)


def catalogue_info(entry: ModelEntry, variant: str) -> AppInfo:
    """A trained model's recorded app info (its tiny variant's at the tiny size); for the others,
    what they would carry had they been trained and exported with their app info."""
    (_, _, height, width), _ = entry.shapes(variant)
    if entry.app is not None:
        info = AppInfo.from_dict(entry.app_info(), where=f"the catalogue's {entry.name}")
        if info.preprocess is None:
            return info
        return dataclasses.replace(
            info, preprocess=dataclasses.replace(info.preprocess, size=(height, width)))
    if entry.task == "segment":
        preprocess = Preprocess(size=(height, width), pad_value=0, mean=IMAGENET_MEAN,
                                std=IMAGENET_STD)
        return AppInfo("segment", (), preprocess, Postprocess(layout="seg_logits", background=0))
    layout = _LAYOUT_OF_CATALOGUE.get(entry.name, "logits")
    return AppInfo(entry.task, (), Preprocess(size=(height, width)), Postprocess(layout=layout))
