"""The application info that travels with a model, and the output layout told from its shapes.

Why it travels with the model: class names, letterbox convention, normalisation and decode
layout are properties of how the model was trained and exported; an app that takes them from a
separate config gets one of them wrong sooner or later (contracts.md, "Model application info").
Stored as the JSON string ``metadata_props["edgefuse.app"]`` of the ONNX file and copied by
``edgefuse compile`` into ``manifest.json["app"]``. A build whose manifest does not carry it yet
is read from the build's ONNX (compile keeps metadata_props).

When a model carries nothing, ``edgefuse.vision.model.layouts`` tells the layout from the outputs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import onnx

from edgefuse import _records as rec
from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Preprocess

METADATA_KEY = "edgefuse.app"
MANIFEST_KEY = "app"
TASKS = ("detect", "segment", "classify")
# Detector layouts: edgefuse.vision.detect.recognise tells them apart, decode reads them.
DETECT_LAYOUTS = ("yolov8", "yolov5", "yolo_head", "yolox", "end2end", "ppyoloe")
SEGMENT_LAYOUTS = ("seg_logits", "seg_logits_nhwc", "seg_sigmoid", "seg_argmax", "yolov8_seg")
LAYOUTS = (*DETECT_LAYOUTS, *SEGMENT_LAYOUTS, "logits")
TASK_OF_LAYOUT = {
    **dict.fromkeys(DETECT_LAYOUTS, "detect"),
    **dict.fromkeys(SEGMENT_LAYOUTS, "segment"),
    "logits": "classify",
}
# What the graph applied to segmentation scores: probabilities (sigmoid, softmax) or logits.
ACTIVATIONS = ("sigmoid", "softmax", "none")
# The boxes of an end2end [1, K, 6] output: x1, y1, x2, y2 in input pixels (YOLOv10, YOLO26,
# Ultralytics end2end exports) or normalised cx, cy, w, h (Ultralytics' RT-DETR export).
BOX_FORMATS = ("xyxy", "cxcywh")
_REF = Ref.BAD_APP_INFO


@dataclasses.dataclass(frozen=True)
class Postprocess:
    """How to decode the outputs; None leaves a value to the app's defaults."""

    layout: str | None = None
    conf: float | None = None
    iou: float | None = None
    max_det: int | None = None
    background: int | None = None
    strides: tuple[int, ...] | None = None  # yolox / PicoDet heads: the FPN strides
    activation: str | None = None  # segmentation scores: one of ACTIVATIONS; None: from the graph
    box_format: str | None = None  # end2end [1, K, 6]: one of BOX_FORMATS; None: from the graph

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> Postprocess:
        rec.check_mapping(data, where, _REF)
        rec.check_keys(data, [f.name for f in dataclasses.fields(cls)], where, _REF)
        if data.get("layout") is not None:
            rec.choice(data["layout"], "layout", LAYOUTS, where, _REF)
        if data.get("activation") is not None:
            rec.choice(data["activation"], "activation", ACTIVATIONS, where, _REF)
        if data.get("box_format") is not None:
            rec.choice(data["box_format"], "box_format", BOX_FORMATS, where, _REF)
        for key in ("conf", "iou"):
            if data.get(key) is not None:
                rec.number(data[key], key, where, _REF, low=0, high=1)
        for key, low in (("max_det", 1), ("background", 0)):
            if data.get(key) is not None:
                rec.number(data[key], key, where, _REF, low=low, integer=True)
        values = {f.name: data.get(f.name) for f in dataclasses.fields(cls)}
        if values["strides"] is not None:
            values["strides"] = check_strides(values["strides"], "strides", where, _REF)
        return cls(**values)


def check_strides(value: Any, key: str, where: str, reference: Ref) -> tuple[int, ...]:
    """FPN strides: a non-empty list of distinct positive integers, ascending (8, 16, 32)."""
    if not isinstance(value, (list, tuple)) or not value:
        raise rec.bad(f"'{key}' must be a list of strides such as [8, 16, 32], got {value!r}",
                      where, reference)
    strides = tuple(int(rec.number(v, key, where, reference, low=1, integer=True))
                    for v in value)
    if list(strides) != sorted(set(strides)):
        raise rec.bad(f"'{key}' must be ascending and distinct, got {list(strides)}", where,
                      reference, hint="YOLOX uses [8, 16, 32] (P6 models [8, 16, 32, 64])")
    return strides


@dataclasses.dataclass(frozen=True)
class AppInfo:
    """The contracts.md record: task, class names, preprocessing, postprocessing."""

    task: str | None = None
    classes: tuple[str, ...] = ()
    preprocess: Preprocess | None = None
    postprocess: Postprocess = Postprocess()
    # Who wrote it, for the line an app prints at start (not part of the record).
    origin: str = dataclasses.field(default="the model's app info", compare=False)
    # Who decided the values that did not come from edgefuse's own record, e.g.
    # (("classes", "the exporter's record (Ultralytics 8.4.190)"),): for the start line only,
    # never written (edgefuse.vision.model.records merges an exporter's record in).
    decided_by: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> AppInfo:
        rec.check_mapping(data, where, _REF)
        rec.check_keys(data, ("task", "classes", "preprocess", "postprocess"), where, _REF)
        task = data.get("task")
        if task is not None:
            rec.choice(task, "task", TASKS, where, _REF)
        classes = rec.strings(data.get("classes") or [], "classes", where, _REF)
        preprocess = data.get("preprocess")
        return cls(
            task=task,
            classes=classes,
            preprocess=Preprocess.from_dict(preprocess, where=f"{where} preprocess".strip())
            if preprocess is not None else None,
            postprocess=Postprocess.from_dict(data.get("postprocess") or {},
                                              where=f"{where} postprocess".strip()),
        )

    def to_dict(self) -> dict[str, Any]:
        post = {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self.postprocess).items() if v is not None}
        data: dict[str, Any] = {"task": self.task, "classes": list(self.classes)}
        if self.preprocess is not None:
            data["preprocess"] = self.preprocess.to_dict()
        data["postprocess"] = post
        return data


def from_onnx(model: onnx.ModelProto, where: str = "") -> AppInfo | None:
    """The info in ``metadata_props["edgefuse.app"]``, None when the model carries none."""
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            try:
                data = json.loads(prop.value)
            except json.JSONDecodeError as exc:
                raise InputError(f"metadata_props['{METADATA_KEY}'] is not JSON: {exc}",
                                 context=where or None, reference=_REF) from exc
            return AppInfo.from_dict(data, f"{where} metadata_props['{METADATA_KEY}']".strip())
    return None


def from_manifest_extra(extra: Mapping[str, Any], where: str = "") -> AppInfo | None:
    """The info a BUILD_DIR's manifest carries under "app", None when it has none."""
    data = extra.get(MANIFEST_KEY)
    return None if data is None else AppInfo.from_dict(data, f"{where} ['app']".strip())


def embed(model: onnx.ModelProto, info: AppInfo) -> onnx.ModelProto:
    """A copy of ``model`` carrying ``info`` in its metadata (replacing any earlier one)."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [p for p in result.metadata_props if p.key != METADATA_KEY]
    del result.metadata_props[:]
    result.metadata_props.extend(kept)
    onnx.helper.set_model_props(result, {
        **{p.key: p.value for p in kept}, METADATA_KEY: json.dumps(info.to_dict()),
    })
    return result
