"""DBNet text detector (Liao et al. 2020) built as PaddleOCR's PP-OCR detector: backbone, DBFPN,
DB head; the exported model returns the text probability map only.

Why in the catalogue: a text detector is the model a random-input FP16 gate cannot judge. Its
probability map is ~0 on noise, so the cosine on noise measures rounding, and calibration has to
run on images (``edgefuse quantize --inputs FOLDER``). Its graph also has what the other entries
lack: a top-down FPN with nearest-neighbour upsampling at four scales, and ConvTranspose.

Layout, following PaddleOCR ``ppocr/modeling/necks/db_fpn.py`` (``DBFPN``) and
``ppocr/modeling/heads/det_db_head.py`` (``DBHead``): the backbone gives maps at strides 4, 8, 16
and 32; each goes through a 1x1 conv to ``out_channels`` (no bias, no BN), the coarser map is
upsampled x2 (nearest) and added top-down; each sum goes through a 3x3 conv to
``out_channels / 4``, is upsampled to stride 4 and the four are concatenated. The head
(``binarize``) is Conv3x3-BN-ReLU to a quarter of the channels, ConvTranspose 2x2/2-BN-ReLU,
ConvTranspose 2x2/2 to one channel, sigmoid: the probability map at input resolution,
``[N, 1, H, W]`` in 0..1. DB's threshold branch and differentiable binarization are training aids;
they are left out, so nothing of them reaches an export.

The backbone is MobileNetV2 (``mobilenet.InvertedResidual``, tapped at the end of each stride)
rather than PP-OCR's MobileNetV3: the blocks are already in the package, and ReLU6 and plain
depthwise convs keep the graph to operators every target runs. ``width`` scales the backbone
(rounded to multiples of 8) and the FPN channels.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from edgefuse.models.mobilenet import TINY_SETTING, ConvBNReLU6, InvertedResidual, make_divisible
from edgefuse.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess

# The stage (index into the MobileNetV2 setting) after which each output stride is reached.
_TAPS = {4: 1, 8: 2, 16: 4, 32: 6}
FPN_CHANNELS = 128  # at width 1.0; PaddleOCR's DB on MobileNetV3 uses 256 at its width 0.5


class MobileNetV2Stages(nn.Module):
    """MobileNetV2's feature blocks in four stages ending at strides 4, 8, 16 and 32."""

    def __init__(self, setting: tuple[tuple[int, int, int, int], ...], width: float) -> None:
        super().__init__()
        channels = make_divisible(32 * width)
        blocks: list[nn.Module] = [ConvBNReLU6(3, channels, stride=2)]
        stages: list[nn.Module] = []
        self.out_channels: list[int] = []
        for index, (t, c, n, s) in enumerate(setting):
            out = make_divisible(c * width)
            for repeat in range(n):
                blocks.append(InvertedResidual(channels, out, s if repeat == 0 else 1, t))
                channels = out
            if index in _TAPS.values():
                stages.append(nn.Sequential(*blocks))
                self.out_channels.append(channels)
                blocks = []
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        features = []
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        return features


class DBFPN(nn.Module):
    """PaddleOCR's DBFPN: lateral 1x1 convs, top-down sums, 3x3 convs, concat at stride 4."""

    def __init__(self, in_channels: list[int], out_channels: int) -> None:
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1, bias=False)
                                     for c in in_channels)
        self.smooth = nn.ModuleList(
            nn.Conv2d(out_channels, out_channels // 4, 3, padding=1, bias=False)
            for _ in in_channels
        )
        self.out_channels = out_channels // 4 * len(in_channels)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        laterals = [conv(f) for conv, f in zip(self.lateral, features, strict=True)]
        for level in range(len(laterals) - 2, -1, -1):  # coarsest to finest
            laterals[level] = laterals[level] + F.interpolate(
                laterals[level + 1], scale_factor=2.0, mode="nearest")
        outputs = []
        for level, (conv, lateral) in enumerate(zip(self.smooth, laterals, strict=True)):
            out = conv(lateral)
            if level:
                out = F.interpolate(out, scale_factor=float(2**level), mode="nearest")
            outputs.append(out)
        return torch.cat(outputs[::-1], dim=1)  # PaddleOCR's order: p5, p4, p3, p2


class DBHead(nn.Sequential):
    """PaddleOCR's ``Head`` (the ``binarize`` branch): stride 4 -> probability map at stride 1."""

    def __init__(self, in_channels: int) -> None:
        quarter = in_channels // 4
        super().__init__(
            nn.Conv2d(in_channels, quarter, 3, padding=1, bias=False),
            nn.BatchNorm2d(quarter),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(quarter, quarter, 2, stride=2),
            nn.BatchNorm2d(quarter),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(quarter, 1, 2, stride=2),
            nn.Sigmoid(),
        )


class DBNet(nn.Module):
    """Backbone, DBFPN and the DB probability head: ``[N, 3, H, W]`` (H, W multiples of 32) ->
    ``[N, 1, H, W]`` text probability."""

    def __init__(self, width: float = 1.0,
                 setting: tuple[tuple[int, int, int, int], ...] = TINY_SETTING) -> None:
        super().__init__()
        self.backbone = MobileNetV2Stages(setting, width)
        self.neck = DBFPN(self.backbone.out_channels, make_divisible(FPN_CHANNELS * width))
        self.head = DBHead(self.neck.out_channels)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The fused stride-4 map the head reads (what a training-only branch would also read)."""
        return self.neck(self.backbone(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


TRAINED_WIDTH = 0.5
TINY_WIDTH = 0.25
# How the trained detector's input is made (PP-OCR's NormalizeImage): RGB pixels / 255, then the
# ImageNet mean and std; its training images are drawn at the input size (height, width).
INPUT_SIZE = (160, 160)
PREPROCESS = Preprocess(size=INPUT_SIZE, resize="stretch", mean=IMAGENET_MEAN, std=IMAGENET_STD)


def dbnet_text(variant: str = "full") -> DBNet:
    """The trained text detector's architecture (width 0.5); tiny: width 0.25.

    Both use MobileNetV2's stages with at most two repeats each (``mobilenet.TINY_SETTING``): the
    detector is trained on one CPU core (``python -m training.text_detector``).
    """
    return DBNet(TINY_WIDTH if variant == "tiny" else TRAINED_WIDTH)
