"""Does the detector's board build, which ends in the YoloHead op (decode + NMS on the device),
return the detections the host decode of the plain model returns? The demo's answer, per frame.

Why frames that agree, and not the AP against the clip's labels: both sides can score the same
AP with different boxes; the question a user of the op asks is whether moving the decode and the
NMS onto the device changed any detection. A frame agrees when both sides found the same number
of boxes and they pair one to one (``match_detections``) with the same class at IoU >= MIN_IOU
and scores within MAX_SCORE_GAP. The board side runs the build's FP16 numerics (on ``sim`` here),
the host side the FP32 model through the apps' YOLOv8 decode, so the tolerances are FP16's: the
box regression moves a shape's corners by a pixel or so, which costs a 40-pixel box a few hundredths
of IoU, and scores near 1 round in steps of 0.0005. A wrong class, a box kept or suppressed by one
side only, or a candidate the kernel's cap dropped all break a frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from edgefuse.metrics.detect import Detections, box_iou, match_detections

MIN_IOU = 0.9
MAX_SCORE_GAP = 0.01
CRITERION = (f"same number of boxes, paired with the same class at IoU >= {MIN_IOU:g}, "
             f"scores within {MAX_SCORE_GAP:g}")


@dataclasses.dataclass(frozen=True)
class HeadParity:
    """How many of ``frames`` agree, and the lowest IoU of a matched pair (None: no pair)."""

    frames: int
    agreeing: int
    worst_iou: float | None

    def describe(self) -> str:
        worst = "" if self.worst_iou is None else f", worst IoU {self.worst_iou:.3f}"
        return f"{self.agreeing}/{self.frames} frames{worst}"


def head_parity(board: Sequence[Detections], host: Sequence[Detections]) -> HeadParity:
    """Frame by frame, the board build's detections against the host decode's."""
    if len(board) != len(host):
        raise ValueError(f"{len(board)} board frames against {len(host)} host frames")
    agreeing, ious = 0, []
    for found, expected in zip(board, host, strict=True):
        matched, missing, extra = match_detections(found, expected, MIN_IOU)
        overlaps = box_iou(expected.boxes, found.boxes)
        ious += [float(overlaps[i, j]) for i, j in matched]
        agreeing += not missing and not extra and all(
            abs(float(found.scores[j]) - float(expected.scores[i])) <= MAX_SCORE_GAP
            for i, j in matched)
    return HeadParity(len(board), agreeing, min(ious) if ious else None)
