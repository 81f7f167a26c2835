"""What a segmentation result adds to a frame's JSON Lines record.

Semantic::

    "pixels": {"background": 250000, "person": 57200},   # pixels per class present
    "foreground_pixels": 57200                            # pixels outside the background class

Instances (``yolov8_seg``)::

    "instances": [{"class": "circle", "class_id": 0, "score": 0.91, "box": [x1, y1, x2, y2],
                   "area": 1234, "polygon": [[x, y], ...]}],   # or "rle": {...}, see below
    "counts": {"circle": 2, "ring": 1}                         # instances per class present

All in frame pixels. ``polygon`` is Ultralytics' ``masks.xy`` (the outer contour with the most
points, what ``Results.tojson`` writes); a mask in several pieces, or with holes, is exact only
as ``rle``: COCO's uncompressed run-length encoding (``{"size": [h, w], "counts": [...]}``,
column-major runs starting with background, what ``pycocotools.mask.frPyObjects`` reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgefuse.vision.draw.overlay import label_of
from edgefuse.vision.segment.decode import Segmentation
from edgefuse.vision.segment.instances import Instances


def describe_semantic(result: Segmentation, names: Sequence[str],
                      background: int | None) -> dict[str, Any]:
    counts = result.pixel_counts()
    foreground = int(counts.sum()) - (int(counts[background]) if background is not None
                                      and background < len(counts) else 0)
    return {"pixels": {label_of(names, int(c)): int(counts[c]) for c in np.flatnonzero(counts)},
            "foreground_pixels": foreground}


def describe_instances(result: Instances, names: Sequence[str],
                       mask_format: str = "polygon") -> dict[str, Any]:
    detections = result.detections
    items = []
    for index, mask in enumerate(result.masks):
        class_id = int(detections.classes[index])
        item: dict[str, Any] = {
            "class": label_of(names, class_id), "class_id": class_id,
            "score": round(float(detections.scores[index]), 4),
            "box": [round(float(v), 2) for v in detections.boxes[index]],
            "area": mask.area,
        }
        if mask_format == "rle":
            item["rle"] = rle(mask.paste(result.frame_size))
        else:
            item["polygon"] = [[round(float(x), 2), round(float(y), 2)]
                               for x, y in result.polygons[index]]
        items.append(item)
    counts = result.class_counts()
    return {"instances": items,
            "counts": {label_of(names, int(c)): int(counts[c]) for c in np.flatnonzero(counts)}}


def rle(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE of a bool [h, w] mask: runs of the column-major pixels, the first
    run counting background (0 when the first pixel is foreground)."""
    pixels = np.asarray(mask, bool).ravel(order="F")
    changes = np.flatnonzero(pixels[1:] != pixels[:-1]) + 1
    bounds = np.concatenate([[0], changes, [pixels.size]])
    runs = np.diff(bounds).tolist()
    if pixels.size and pixels[0]:
        runs = [0, *runs]
    return {"size": list(mask.shape), "counts": runs}
