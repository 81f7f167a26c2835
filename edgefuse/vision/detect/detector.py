"""Detector: a YOLO model (v5, v8 or with edgefuse's YoloHead) as a pipeline task.

Why a class users can hold: their own programs want ``Detector.open("build/")(frame)`` for one
image and ``Pipeline(source, detector, sinks)`` for a stream, with the thresholds, class names
and letterbox convention the model carries (``model_info``), and no decode code of their own.

Thresholds come, in order of precedence, from the constructor's arguments, the model's app info
(``postprocess.conf/iou/max_det``) and Ultralytics' predict defaults (0.25, 0.45, 300).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.manifest import BuildManifest
from edgefuse.metrics.detect import Detections
from edgefuse.model_info import AppInfo
from edgefuse.preprocess import Geometry
from edgefuse.session import Session
from edgefuse.vision.detect import decode as detect
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.overlay import draw_detections, label_of
from edgefuse.vision.model.adapter import VisionModel


class Detector(VisionModel):
    """Boxes in frame pixels for each frame; ``annotate`` draws them, ``describe`` lists them."""

    task = "detect"

    def __init__(self, session: Session, *, info: AppInfo | None = None,
                 manifest: BuildManifest | None = None,
                 preprocess: Mapping[str, Any] | None = None, label: str = "the model",
                 conf: float | None = None, iou: float | None = None,
                 max_det: int | None = None, classes: Sequence[int] | None = None,
                 agnostic: bool = False, class_names: Sequence[str] | None = None,
                 line_width: int | None = None) -> None:
        super().__init__(session, info=info, manifest=manifest, preprocess=preprocess,
                         label=label)
        post = self.info.postprocess
        defaults = detect.DetectOptions()
        self.options = detect.DetectOptions(
            conf=_first(conf, post.conf, defaults.conf),
            iou=_first(iou, post.iou, defaults.iou),
            max_det=_first(max_det, post.max_det, defaults.max_det),
            classes=tuple(classes) if classes is not None else None,
            agnostic=agnostic,
        )
        self.class_names = tuple(class_names or self.info.classes or self._numbered_names())
        self.colours = palette.bgr(palette.palette("boxes"))
        self.line_width = line_width

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Geometry) -> Detections:
        return detect.decode(outputs, self.layout, geometry, self.options)

    def annotate(self, image: np.ndarray, result: Detections) -> np.ndarray:
        return draw_detections(image, result, self.class_names, self.colours,
                               line_width=self.line_width)

    def describe(self, result: Detections) -> dict[str, Any]:
        return {"detections": [
            {"class": label_of(self.class_names, int(c)), "class_id": int(c),
             "score": round(float(s), 4), "box": [round(float(v), 2) for v in box]}
            for box, s, c in zip(result.boxes, result.scores, result.classes, strict=True)
        ]}

    def _numbered_names(self) -> tuple[str, ...]:
        """class0, class1, ... as many as the raw output has classes (none for a YoloHead)."""
        outputs = [o for o in self.session.outputs if len(o.shape) == 3]
        if self.layout not in ("yolov8", "yolov5") or len(outputs) != 1:
            return ()
        _, channels_v8, channels_v5 = outputs[0].shape
        channels = channels_v8 if self.layout == "yolov8" else channels_v5
        if not isinstance(channels, int):
            return ()
        return tuple(f"class{i}" for i in range(channels - (4 if self.layout == "yolov8" else 5)))


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)
