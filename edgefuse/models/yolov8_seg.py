"""The shapes detector with YOLOv8-seg's mask branch: instance masks on the camera apps' scenes.

Why this shape (Ultralytics' ``Segment`` head, ``ultralytics/nn/modules/head.py``): the detector's
``Detect`` head unchanged, plus per scale a 3-conv branch ``cv4`` giving 32 mask coefficients per
anchor, and a ``Proto`` module on the stride-8 features giving 32 prototypes at a quarter of the
input (Conv 3x3, 2x upsample, Conv 3x3, Conv 1x1; the 2x upsample is YOLOv5-seg's nearest
``nn.Upsample``, where v8 uses a stride-2 ConvTranspose). The export is Ultralytics' seg export:
``output0 [1, 4 + C + 32, N]`` (the detector's rows, then the coefficients) and
``output1 [1, 32, H/4, W/4]``, the ``yolov8_seg`` layout the segmentation app decodes.

Why the detector's weights stay as trained: ``python -m training.shapes --task instance`` trains
only the mask branch on the frozen, shipped detector (minutes on one CPU thread instead of the
detector's half hour), so boxes and scores are exactly the detector's and only the masks are new;
``shapes_yolov8_seg.pt`` holds the branch alone.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from edgefuse.models import shapes
from edgefuse.models._trained import WEIGHTS_DIR, load_trained
from edgefuse.models._yolo_blocks import Conv, LayerGraph
from edgefuse.models.yolov8 import yolov8_shapes

COEFFICIENTS = 32
PROTO_CHANNELS = 32
COEFFICIENT_CHANNELS = 16


class Proto(nn.Module):
    """Stride-8 features -> ``COEFFICIENTS`` prototypes at stride 4."""

    def __init__(self, c1: int, hidden: int = PROTO_CHANNELS, c2: int = COEFFICIENTS) -> None:
        super().__init__()
        self.cv1 = Conv(c1, hidden, 3)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.cv2 = Conv(hidden, hidden, 3)
        self.cv3 = nn.Conv2d(hidden, c2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(self.cv2(self.upsample(self.cv1(x))))


class MaskBranch(nn.Module):
    """Per scale ``cv4`` (3 convs to 32 coefficients per anchor) and the ``Proto`` module."""

    def __init__(self, channels: list[int]) -> None:
        super().__init__()
        self.proto = Proto(channels[0])
        self.cv4 = nn.ModuleList(
            nn.Sequential(Conv(c, COEFFICIENT_CHANNELS, 3),
                          Conv(COEFFICIENT_CHANNELS, COEFFICIENT_CHANNELS, 3),
                          nn.Conv2d(COEFFICIENT_CHANNELS, COEFFICIENTS, 1))
            for c in channels)

    def forward(self, features: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(coefficients [B, 32, N], prototypes [B, 32, H/4, W/4])."""
        batch = features[0].shape[0]
        coefficients = torch.cat([branch(f).view(batch, COEFFICIENTS, -1)
                                  for branch, f in zip(self.cv4, features, strict=True)], 2)
        return coefficients, self.proto(features[0])


class InstanceSegmenter(nn.Module):
    """A ``LayerGraph`` detector plus a ``MaskBranch``; returns (predictions, prototypes)."""

    def __init__(self, detector: LayerGraph, branch: MaskBranch | None = None) -> None:
        super().__init__()
        self.detector = detector
        head = detector.model[-1]
        self.branch = branch or MaskBranch([b[0].conv.in_channels for b in head.cv2])

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The inputs of the detector's head (its ``f`` layers), as ``LayerGraph`` runs them."""
        outputs: list[torch.Tensor] = []
        for module in self.detector.model[:-1]:
            if module.f != -1:
                x = [x if j == -1 else outputs[j] for j in module.f]
            x = module(x)
            outputs.append(x)
        return [outputs[j] for j in self.detector.model[-1].f]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.features(x)
        coefficients, prototypes = self.branch(features)
        return torch.cat((self.detector.model[-1](features), coefficients), 1), prototypes


def yolov8_seg_shapes(variant: str = "full") -> InstanceSegmenter:
    """The shapes detector's layout with an untrained mask branch."""
    return InstanceSegmenter(yolov8_shapes(variant))


def trained_yolov8_seg_shapes(folder: Path = WEIGHTS_DIR) -> InstanceSegmenter:
    """The shipped detector (``shapes_yolov8.pt``) with the shipped mask branch
    (``shapes_yolov8_seg.pt``, the branch alone: the detector is not stored twice)."""
    detector = load_trained(yolov8_shapes(), folder / f"{shapes.DETECTOR}.pt",
                            "python -m training.shapes --task detect")
    model = InstanceSegmenter(detector)
    load_trained(model.branch, folder / f"{shapes.INSTANCE}.pt",
                 "python -m training.shapes --task instance")
    return model.eval()
