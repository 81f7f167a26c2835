"""Detector: a detection model (any layout of ``decode``) as a pipeline task.

Why a class users can hold: their own programs want ``Detector.open("build/")(frame)`` for one
image and ``Pipeline(source, detector, sinks)`` for a stream, with the thresholds, class names
and letterbox convention the model carries (``model_info``), and no decode code of their own.

Thresholds come, in order of precedence, from the constructor's arguments, the model's app info
(``postprocess.conf/iou/max_det``), its exporter's record (an Ultralytics export: its family's
predict defaults 0.25, 0.7, 300; ``records``) and edgefuse's defaults (0.25, 0.45, 300).

The layout comes from the ``layout`` argument (the config's ``layout:``), else the app info's
``postprocess.layout``, else ``recognise`` tells it from the outputs and the graph; either way it
is bound to the output names and checked against the shapes (and the class names' count) when
the model is opened, and ``layout_note`` says which it is and why.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from edgefuse.errors import InputError, Ref
from edgefuse.manifest import BuildManifest
from edgefuse.metrics.detect import Detections
from edgefuse.model_info import AppInfo, check_strides
from edgefuse.model_source import resolve_source
from edgefuse.preprocess import Geometry
from edgefuse.runtime import DEFAULT_BACKENDS
from edgefuse.session import Session
from edgefuse.vision.detect import decode as detect
from edgefuse.vision.detect.graph_tail import tails
from edgefuse.vision.detect.heads import Heads
from edgefuse.vision.detect.recognise import Evidence, bind, recognise
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.labels import LabelPlacer
from edgefuse.vision.draw.overlay import draw_detections, label_of
from edgefuse.vision.model import layouts, records
from edgefuse.vision.model.adapter import VisionModel
from edgefuse.vision.model.extra_inputs import in_graph_geometry, scaled_outputs
from edgefuse.vision.model.families import FamilyCall, by_heads

Graph = onnx.ModelProto | str | os.PathLike[str] | None


class Detector(VisionModel):
    """Boxes in frame pixels for each frame; ``annotate`` draws them, ``describe`` lists them."""

    task = "detect"

    def __init__(self, session: Session, *, info: AppInfo | None = None,
                 manifest: BuildManifest | None = None,
                 preprocess: Mapping[str, Any] | None = None, label: str = "the model",
                 conf: float | None = None, iou: float | None = None,
                 max_det: int | None = None, classes: Sequence[int] | None = None,
                 agnostic: bool | None = None, class_names: Sequence[str] | None = None,
                 line_width: int | None = None, layout: str | None = None,
                 strides: Sequence[int] | None = None, graph: Graph = None,
                 box_format: str | None = None) -> None:
        info = info or AppInfo()
        self.heads: Heads | None = None
        decided_by = dict(info.decided_by)
        self._layout_origin = ("'layout:' in the config" if layout else
                               decided_by.get("layout", "the model's app info")
                               if info.postprocess.layout else None)
        self._declared = layout or info.postprocess.layout
        self._box_format = box_format or info.postprocess.box_format
        self._given = {k for k, v in (("conf", conf), ("iou", iou), ("max_det", max_det))
                       if v is not None}
        post = info.postprocess
        self._thresholds_origin = (
            decided_by.get("thresholds", "the model's app info")
            if (post.conf, post.iou, post.max_det) != (None, None, None) else "edgefuse")
        self._strides = (check_strides(strides, "strides", label, Ref.BAD_CONFIG) if strides
                         else info.postprocess.strides)
        self._class_count = len(class_names or info.classes) or None
        self._graph = graph
        self._why = ""
        super().__init__(session, info=info, manifest=manifest, preprocess=preprocess,
                         label=label)
        self._resize_note = self._stretch_a_detr(preprocess)
        post = self.info.postprocess
        defaults = detect.DetectOptions()
        self.options = detect.DetectOptions(
            conf=_first(conf, post.conf, defaults.conf),
            iou=_first(iou, post.iou, defaults.iou),
            max_det=_first(max_det, post.max_det, defaults.max_det),
            classes=tuple(classes) if classes is not None else None,
            agnostic=agnostic,
            strides=self._strides,
        )
        self.class_names = tuple(class_names or self.info.classes or self._numbered_names())
        self.palette = palette.SceneAware(palette.distinct())
        self.colours = self.palette.colours(None, len(palette.DISTINCT))
        self.line_width = line_width
        scaled = scaled_outputs(self._graph_model(), self.plan.extras)
        # No graph to read (an OM): PaddleDetection's exports divide by the scale_factor fed.
        self._in_graph_scale = (bool(self.plan.extras) if scaled is None else
                                self.heads is not None and self.heads.names[0] in scaled)

    @classmethod
    def open(cls, model: Any, *, backends: str | Iterable[str] = DEFAULT_BACKENDS,
             strict: bool = False, info: AppInfo | None = None,
             session_options: Mapping[str, Any] | None = None, **task_options: Any) -> Any:
        """``VisionModel.open``, with the model's ONNX graph read to tell the layout."""
        source = resolve_source(model)
        task_options.setdefault("graph", source.onnx)
        return super().open(source, backends=backends, strict=strict, info=info,
                            session_options=session_options, **task_options)

    @property
    def layout_note(self) -> str:
        """``layout yolox (3 classes, strides 8,16,32), told from the graph: ...``."""
        if self.heads is None:
            return ""
        note = f"layout {self.heads.describe()}, {self._why}"
        if self.heads.box_why and self.heads.box_why != "declared":
            note += f" ({self.heads.box_why})"
        options = self.options
        values = ", ".join(f"{key} {getattr(options, key):g}"
                           + (" (config)" if key in self._given else "")
                           for key in ("conf", "iou", "max_det"))
        nms = ("no NMS" if self.layout in ("end2end", "yolo_head") else
               "class-agnostic NMS" if _agnostic(self.layout, options) else "class-aware NMS")
        note += f"; {values}, {nms} (defaults from {self._thresholds_origin})"
        decided = records.describe_decided(self.info, skip=("layout", "thresholds"))
        return note + (f"; {decided}" if decided else "") + self._resize_note

    def _stretch_a_detr(self, preprocess: Mapping[str, Any] | None) -> str:
        """A DETR-family model (boxes normalised to the input) whose frame fitting nobody set is
        stretched to the input, as its family's predictors resize: RT-DETR's
        ``references/deploy/rtdetr_onnxruntime.py`` (``T.Resize((640, 640))``), D-FINE's, and
        Hugging Face's ``RTDetrImageProcessor`` (``do_resize`` to 640 x 640, ratio not kept)."""
        heads = self.heads
        detr = heads is not None and (heads.form == "detr" or heads.box_format == "cxcywh")
        if (not detr or self.info.preprocess is not None or self.plan.aipp
                or "resize" in (preprocess or {})):
            return ""
        fitted = dataclasses.replace(self.plan.preprocess, resize="stretch")
        self.plan = dataclasses.replace(self.plan, preprocess=fitted)
        return ("; input stretched to {}x{} (the DETR family's resize; set preprocess.resize "
                "to letterbox otherwise)".format(*fitted.size))

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Geometry) -> Detections:
        if self._in_graph_scale:  # the graph divided the boxes by the scale_factor fed
            geometry = in_graph_geometry(geometry)
        return detect.decode(outputs, self.layout, geometry, self.options, self.heads)

    def annotate(self, image: np.ndarray, result: Detections, *,
                 ids: Sequence[int] | None = None, placer: LabelPlacer | None = None,
                 ) -> np.ndarray:
        """A copy of ``image`` with each box and its one label (``#id`` first where ``ids``
        gives one, -1: none), the labels off each other and off what ``placer`` holds; class
        colours from the distinct palette, ordered against the first scene seen (``colours``
        then holds them)."""
        self.colours = self.palette.colours(image, len(palette.DISTINCT))
        return draw_detections(image, result, self.class_names, self.colours,
                               line_width=self.line_width, ids=ids, placer=placer)

    def describe(self, result: Detections) -> dict[str, Any]:
        return {"layout": self.layout, "detections": [
            {"class": label_of(self.class_names, int(c)), "class_id": int(c),
             "score": round(float(s), 4), "box": [round(float(v), 2) for v in box]}
            for box, s, c in zip(result.boxes, result.scores, result.classes, strict=True)
        ]}

    def _find_layout(self, outputs: list[tuple[str, tuple, str]]) -> str | None:
        """The declared layout bound to the outputs, else the one ``recognise`` finds."""
        evidence = Evidence(self.plan.preprocess.size, self._class_count, self._strides,
                            self._tails(), self._box_format)
        if self._declared is not None and self._declared not in detect.LAYOUTS:
            return self._declared  # a segmentation layout: _check_layout says wrong kind
        if not all(all(isinstance(d, int) for d in shape) for _, shape, _ in outputs):
            return None  # dynamic shapes: warm_up runs once and calls this again
        stale = ""
        if self._declared is not None:
            try:
                self.heads = bind(self._declared, outputs, evidence)
            except InputError as why:
                if not self._layout_origin.startswith(records.EXPORTER):
                    raise
                # The graph changed after the export (an appended YoloHead, a cut tail): the
                # record no longer describes the outputs, which then speak for themselves.
                stale = (f"the exporter's record says '{self._declared}', which cannot read "
                         f"these outputs ({why.message.split(': ', 1)[-1]}); ")
            else:
                self._why = f"set by {self._layout_origin}"
                return self.heads.layout
        found = recognise(outputs, evidence)
        if found is None:
            other = layouts.detect_layout(outputs, self._class_count)
            if other is not None and other not in detect.LAYOUTS:
                return other  # a segmenter or classifier: _check_layout says so
            raise InputError(
                f"the outputs of {self.label} fit no detector layout: " + ", ".join(
                    f"{n} {d}[{','.join(map(str, s))}]" for n, s, d in outputs),
                hint="a detector has one of the layouts yolov8 [1, 4+C, N], yolov5/yolox "
                     "[1, N, 5+C], end2end [1, K, 6] or DETR boxes + logits, ppyoloe boxes + "
                     "scores or PicoDet heads, yolo_head; set 'layout:' if it is one of them",
                reference=Ref.BAD_LAYOUT)
        self.heads, self._why = found
        self._why = stale + self._why
        return self.heads.layout

    def _family(self) -> FamilyCall | None:
        return by_heads(self.heads.layout, self.heads.form) if self.heads is not None else None

    def _graph_model(self) -> onnx.ModelProto | None:
        if self._graph is not None and not isinstance(self._graph, onnx.ModelProto):
            self._graph = onnx.load(os.fspath(self._graph), load_external_data=False)
        return self._graph

    def _tails(self) -> dict | None:
        graph = self._graph_model()
        return tails(graph) if graph is not None else None

    def _numbered_names(self) -> tuple[str, ...]:
        """class0, class1, ... as many as the outputs have classes (none for a YoloHead)."""
        count = self.heads.num_classes if self.heads is not None else None
        return tuple(f"class{i}" for i in range(count or 0))


def _agnostic(layout: str, options: detect.DetectOptions) -> bool:
    """Whether NMS runs across classes (no NMS at all for end2end and yolo_head)."""
    return options.agnostic if options.agnostic is not None else layout == "yolox"


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)
