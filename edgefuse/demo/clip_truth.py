"""The sample clip's ground truth, rendered again from its recorded seed, and the scores of a
detector's and a segmenter's results against it.

Why render again: the clip ships as a video; its boxes and masks come from the same scene
generator and seed (``shapes.json`` records them), so the labels are exact for every frame and
cost no file. The video's compression changes pixels, not what is where.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.metrics.detect import Detections, average_precision
from edgefuse.metrics.segment import mean_iou
from edgefuse.models import shapes
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP, Scene, SceneGenerator
from edgefuse.vision.segment.decode import Segmentation


def clip_scenes() -> list[Scene]:
    """Every frame of the sample clip with its labels, as the training command rendered it."""
    record = shapes.read_record()["clip"]
    generator = SceneGenerator(record["scene_seed"], tuple(record["size"]))
    return list(generator.clip(record["clip_index"], record["frames"], record["fps"]))


def detection_ap50(results: Sequence[Detections], truth: Sequence[Scene]) -> float:
    """AP50 of per-frame detections (frame pixels) against the clip's boxes."""
    _same_length(results, truth)
    expected = [Detections(scene.boxes, np.ones(len(scene.boxes), np.float32), scene.classes)
                for scene in truth]
    return float(average_precision(list(results), expected)["AP50"])


def segmentation_miou(results: Sequence[Segmentation], truth: Sequence[Scene],
                      classes: int) -> float:
    """Mean IoU of per-frame class maps against the clip's masks (0 background, class + 1)."""
    _same_length(results, truth)
    reference = np.stack([scene.mask for scene in truth])
    candidate = np.stack([result.class_map for result in results])
    return float(mean_iou(reference, candidate, classes)["mean_iou"])


def _same_length(results: Sequence[object], truth: Sequence[Scene]) -> None:
    if len(results) != len(truth):
        raise InputError(f"the sample clip decoded to {len(results)} frames; its record says "
                         f"{len(truth)}", context=str(SAMPLE_CLIP),
                         hint="the installed clip is damaged: reinstall edgefuse",
                         reference=Ref.BAD_SOURCE)
