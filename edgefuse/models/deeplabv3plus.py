"""DeepLabV3+ (output stride 16) on MobileNetV2 and ResNet-50, laid out as VainF's implementation.

Why VainF/DeepLabV3Plus-Pytorch: it is the PyTorch DeepLabV3+ most people export, so its module
tree is what users bring: ``backbone.*`` (for MobileNetV2 ``low_level_features`` and
``high_level_features``, for ResNet ``conv1``..``layer4``), ``classifier.project`` (the 48-channel
low-level projection), ``classifier.aspp.convs.0..4`` (1x1, three atrous 3x3 at rates 6/12/18,
image pooling), ``classifier.aspp.project`` and ``classifier.classifier`` (3x3 fuse, 1x1 to the
classes). Its checkpoints load here by state_dict, and the forward follows theirs (read from their
source, not run against it), quirks included: VainF's MobileNetV2 pads each block's input with
``F.pad`` before the (unpadded) expand and depthwise convs, and its stem conv has no padding.

The segmenter's graph exercises what classifiers do not: dilated convolutions, a global pooling
branch broadcast back by bilinear resize, concatenations of branches, and a final resize to the
input size.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from edgefuse.models.mobilenet import FULL_SETTING, TINY_SETTING, make_divisible
from edgefuse.models.resnet import ResNet
from edgefuse.models.shapes import NUM_CLASSES as SHAPE_CLASSES
from edgefuse.models.shapes import (
    SEGMENTER_ASPP_CHANNELS,
    SEGMENTER_PROJECT_CHANNELS,
    SEGMENTER_RATES,
    SEGMENTER_WIDTH,
)

OUTPUT_STRIDE = 16
ATROUS_RATES = (6, 12, 18)  # VainF's rates for output stride 16
# The tiny variants' high-level map is 8x8: rates 6/12/18 would reach only zero padding there and
# degenerate to 1x1 convs, so they get rates whose taps land inside the map.
TINY_ATROUS_RATES = (2, 4, 6)
NUM_CLASSES = 21


class _UnpaddedConvBNReLU6(nn.Sequential):
    """VainF's ConvBNReLU: padding 0 (the caller pads), children 0 (conv), 1 (BN), 2 (ReLU6)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        dilation: int = 1,
        groups: int = 1,
    ) -> None:
        super().__init__(
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                0,
                dilation=dilation,
                groups=groups,
                bias=False,
            ),
            nn.BatchNorm2d(out_channels),
            nn.ReLU6(inplace=True),
        )


class _DilatedInvertedResidual(nn.Module):
    """VainF's InvertedResidual: pad the block input for the dilated 3x3, then expand/dw/project."""

    def __init__(self, inp: int, oup: int, stride: int, dilation: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_UnpaddedConvBNReLU6(inp, hidden, kernel_size=1))
        layers += [
            _UnpaddedConvBNReLU6(hidden, hidden, stride=stride, dilation=dilation, groups=hidden),
            nn.Conv2d(hidden, oup, 1, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        effective = 3 + 2 * (dilation - 1)
        begin = (effective - 1) // 2
        end = effective - 1 - begin
        self.input_padding = (begin, end, begin, end)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x, self.input_padding)
        return x + self.conv(padded) if self.use_res_connect else self.conv(padded)


class MobileNetV2Backbone(nn.Module):
    """VainF's dilated MobileNetV2, split after stride 4 (low level) and before the 1280 conv."""

    def __init__(
        self, setting: tuple[tuple[int, int, int, int], ...], width_mult: float = 1.0
    ) -> None:
        super().__init__()
        input_channel = make_divisible(32 * width_mult)
        features: list[nn.Module] = [_UnpaddedConvBNReLU6(3, input_channel, stride=2)]
        current_stride, dilation = 2, 1
        low_level_end = 1 + setting[0][2] + setting[1][2]  # after the stride-4 stage
        for t, c, n, s in setting:
            previous_dilation = dilation
            if current_stride == OUTPUT_STRIDE:
                stride, dilation = 1, dilation * s
            else:
                stride, current_stride = s, current_stride * s
            output_channel = int(c * width_mult)  # VainF truncates here, unlike torchvision
            for i in range(n):
                features.append(
                    _DilatedInvertedResidual(
                        input_channel,
                        output_channel,
                        stride if i == 0 else 1,
                        previous_dilation if i == 0 else dilation,
                        t,
                    )
                )
                input_channel = output_channel
            if len(features) == low_level_end:
                self.low_level_channels = output_channel
        self.out_channels = input_channel
        self.low_level_features = nn.Sequential(*features[:low_level_end])
        self.high_level_features = nn.Sequential(*features[low_level_end:])

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low_level = self.low_level_features(x)
        return low_level, self.high_level_features(low_level)


def _conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int = 1, dilation: int = 1):
    return nn.Sequential(
        nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            padding=dilation if kernel_size == 3 else 0,
            dilation=dilation,
            bias=False,
        ),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class ASPPPooling(nn.Sequential):
    """Image-level features: global average, 1x1 conv, broadcast back by bilinear resize."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        return F.interpolate(super().forward(x), size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    """1x1, three atrous 3x3 and image pooling, concatenated and projected (dropout in training)."""

    def __init__(self, in_channels: int, rates: tuple[int, int, int], out_channels: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [_conv_bn_relu(in_channels, out_channels)]
            + [_conv_bn_relu(in_channels, out_channels, 3, rate) for rate in rates]
            + [ASPPPooling(in_channels, out_channels)]
        )
        self.project = nn.Sequential(
            nn.Conv2d(5 * out_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Dropout(0.1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(torch.cat([conv(x) for conv in self.convs], dim=1))


class DeepLabHeadV3Plus(nn.Module):
    """ASPP on the high-level map, upsampled to the low-level map, fused with its projection."""

    def __init__(
        self,
        in_channels: int,
        low_level_channels: int,
        num_classes: int,
        rates: tuple[int, int, int],
        aspp_channels: int = 256,
        project_channels: int = 48,
    ) -> None:
        super().__init__()
        self.project = _conv_bn_relu(low_level_channels, project_channels)
        self.aspp = ASPP(in_channels, rates, aspp_channels)
        self.classifier = nn.Sequential(
            nn.Conv2d(project_channels + aspp_channels, aspp_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(aspp_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(aspp_channels, num_classes, 1),
        )

    def forward(self, low_level: torch.Tensor, high_level: torch.Tensor) -> torch.Tensor:
        low_level = self.project(low_level)
        high_level = F.interpolate(
            self.aspp(high_level), size=low_level.shape[2:], mode="bilinear", align_corners=False
        )
        return self.classifier(torch.cat([low_level, high_level], dim=1))


class DeepLabV3Plus(nn.Module):
    """Backbone + DeepLabV3+ head; logits resized (bilinear) to the input's height and width."""

    def __init__(self, backbone: nn.Module, classifier: DeepLabHeadV3Plus) -> None:
        super().__init__()
        self.backbone = backbone
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        low_level, high_level = self.backbone.features(x)
        logits = self.classifier(low_level, high_level)
        return F.interpolate(logits, size=size, mode="bilinear", align_corners=False)


def deeplabv3plus_mobilenetv2(variant: str = "full") -> DeepLabV3Plus:
    """VainF's ``deeplabv3plus_mobilenet(output_stride=16)``; tiny: width 0.25, 32-channel ASPP."""
    if variant == "tiny":
        return deeplabv3plus_on_mobilenetv2(
            setting=TINY_SETTING, width_mult=0.25, rates=TINY_ATROUS_RATES, aspp_channels=32,
            project_channels=8,
        )
    return deeplabv3plus_on_mobilenetv2()


def deeplabv3plus_on_mobilenetv2(
    *,
    num_classes: int = NUM_CLASSES,
    setting: tuple[tuple[int, int, int, int], ...] = FULL_SETTING,
    width_mult: float = 1.0,
    rates: tuple[int, int, int] = ATROUS_RATES,
    aspp_channels: int = 256,
    project_channels: int = 48,
) -> DeepLabV3Plus:
    """DeepLabV3+ on MobileNetV2 at any width, head width, atrous rates and class count."""
    backbone = MobileNetV2Backbone(setting, width_mult=width_mult)
    head = DeepLabHeadV3Plus(
        backbone.out_channels, backbone.low_level_channels, num_classes, rates,
        aspp_channels=aspp_channels, project_channels=project_channels,
    )
    return DeepLabV3Plus(backbone, head)


def deeplabv3plus_resnet50(variant: str = "full") -> DeepLabV3Plus:
    """VainF's ``deeplabv3plus_resnet50(output_stride=16)``; tiny: ResNet at 1/8 width."""
    tiny = variant == "tiny"
    layers = (1, 1, 1, 2) if tiny else (3, 4, 6, 3)
    backbone = ResNet(layers, width=8 if tiny else 64, dilate_last_stage=True, include_top=False)
    return DeepLabV3Plus(backbone, _head(backbone, tiny))


def _head(backbone: nn.Module, tiny: bool) -> DeepLabHeadV3Plus:
    if tiny:
        return DeepLabHeadV3Plus(
            backbone.out_channels,
            backbone.low_level_channels,
            NUM_CLASSES,
            TINY_ATROUS_RATES,
            aspp_channels=32,
            project_channels=8,
        )
    return DeepLabHeadV3Plus(
        backbone.out_channels, backbone.low_level_channels, NUM_CLASSES, ATROUS_RATES
    )


def deeplabv3plus_shapes(variant: str = "full") -> DeepLabV3Plus:
    """The shapes segmenter's layout (MobileNetV2 x0.35, 64-channel ASPP); tiny is the same."""
    return deeplabv3plus_on_mobilenetv2(
        num_classes=SHAPE_CLASSES + 1,
        width_mult=SEGMENTER_WIDTH,
        rates=SEGMENTER_RATES,
        aspp_channels=SEGMENTER_ASPP_CHANNELS,
        project_channels=SEGMENTER_PROJECT_CHANNELS,
    )
