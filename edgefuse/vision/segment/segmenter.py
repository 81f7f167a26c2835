"""Segmenter: a segmentation model (class logits, a sigmoid mask, an argmax map) as a task.

Why the class names and background id matter here: the overlay leaves background pixels as they
are and the JSON Lines record counts pixels per class name, so both come from the model's app
info (``classes``, ``postprocess.background``) or the caller. A sigmoid mask has two classes,
background (0) and its one foreground class (1): a single configured name is the foreground.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.manifest import BuildManifest
from edgefuse.model_info import AppInfo
from edgefuse.preprocess import Geometry
from edgefuse.session import Session
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.overlay import label_of, overlay
from edgefuse.vision.model.adapter import VisionModel
from edgefuse.vision.segment import decode as segment
from edgefuse.vision.segment.decode import Segmentation


class Segmenter(VisionModel):
    """A class map in frame pixels for each frame; ``annotate`` blends it over the frame."""

    task = "segment"

    def __init__(self, session: Session, *, info: AppInfo | None = None,
                 manifest: BuildManifest | None = None,
                 preprocess: Mapping[str, Any] | None = None, label: str = "the model",
                 class_names: Sequence[str] | None = None,
                 colours: str | Sequence[Any] = "voc", alpha: float = 0.5,
                 background: int | None = None, threshold: float = 0.5) -> None:
        super().__init__(session, info=info, manifest=manifest, preprocess=preprocess,
                         label=label)
        names = tuple(class_names or self.info.classes)
        if self.layout == "seg_sigmoid" and len(names) < 2:
            names = ("background", *(names or ("foreground",)))
        self.class_names = names
        self.palette_spec = colours
        self.alpha = alpha
        post_background = self.info.postprocess.background
        self.background = background if background is not None else (
            post_background if post_background is not None else 0)
        self.threshold = threshold
        self._colours: np.ndarray | None = None

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Geometry) -> Segmentation:
        output = next(iter(outputs.values()))
        return segment.decode(output, self.layout, geometry,
                              num_classes=len(self.class_names) or None,
                              threshold=self.threshold)

    def annotate(self, image: np.ndarray, result: Segmentation) -> np.ndarray:
        if self._colours is None or len(self._colours) < result.num_classes:
            self._colours = palette.bgr(palette.palette(self.palette_spec, result.num_classes))
        return overlay(image, result.class_map, self._colours, alpha=self.alpha,
                       background=self.background, outline=True)

    def describe(self, result: Segmentation) -> dict[str, Any]:
        counts = result.pixel_counts()
        return {"pixels": {label_of(self.class_names, int(c)): int(counts[c])
                           for c in np.flatnonzero(counts)}}
