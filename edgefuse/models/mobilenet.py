"""MobileNetV2 in torchvision's layout, so that torchvision checkpoints load by state_dict.

Why it is in the catalogue: depthwise 3x3 convolutions, ReLU6 (a Clip in ONNX) and linear
bottlenecks without an activation are what make mobile graphs different from ResNet for a converter
and for BN folding. The module tree is torchvision's: ``features.0`` the stem
(Conv, BN, ReLU6), ``features.1..17`` InvertedResidual blocks (``conv.0`` expand, ``conv.1``
depthwise, ``conv.2``/``conv.3`` the linear projection and its BN), ``features.18`` the 1x1 to
1280 channels, ``classifier.1`` the Linear.
"""

from __future__ import annotations

import torch
from torch import nn

# t (expansion), c (output channels), n (repeats), s (stride of the first repeat)
FULL_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
# Every stage kept (so every stride and every residual kind), two repeats where a stage has a
# residual block in the full network.
TINY_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 2, 2),
    (6, 64, 2, 2),
    (6, 96, 2, 1),
    (6, 160, 2, 2),
    (6, 320, 1, 1),
)


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels to a multiple of ``divisor`` without losing more than 10% (TF-slim's rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvBNReLU6(nn.Sequential):
    """torchvision's Conv2dNormActivation with ReLU6: children 0 (conv), 1 (BN), 2 (ReLU6)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
    ) -> None:
        super().__init__(
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                (kernel_size - 1) // 2,
                groups=groups,
                bias=False,
            ),
            nn.BatchNorm2d(out_channels),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """Expand 1x1, depthwise 3x3, project 1x1 without activation; a residual when shapes allow."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, oup, 1, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 (``width_mult`` rounds channels to multiples of 8)."""

    def __init__(
        self,
        setting: tuple[tuple[int, int, int, int], ...] = FULL_SETTING,
        *,
        width_mult: float = 1.0,
        last_channel: int = 1280,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        input_channel = make_divisible(32 * width_mult)
        last_channel = make_divisible(last_channel * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = make_divisible(c * width_mult)
            for i in range(n):
                stride = s if i == 0 else 1
                features.append(InvertedResidual(input_channel, output_channel, stride, t))
                input_channel = output_channel
        features.append(ConvBNReLU6(input_channel, last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(last_channel, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenetv2(variant: str = "full") -> MobileNetV2:
    """MobileNetV2 1.0; the tiny variant is width 0.25 with a 128-channel last conv."""
    if variant == "tiny":
        return MobileNetV2(TINY_SETTING, width_mult=0.25, last_channel=128)
    return MobileNetV2()
