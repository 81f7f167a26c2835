"""ResNet-50 in torchvision's layout, so that torchvision checkpoints load by state_dict.

Why its own copy: torchvision is not a dependency, yet the catalogue's classifier must have the
exact module tree of ``torchvision.models.resnet50`` (``conv1``, ``bn1``, ``layer1..4`` of
Bottlenecks with ``downsample.0/.1``, ``fc``): that is the graph users bring, and the one whose
state_dict keys they can load. Bottleneck is v1.5 (the stride sits on the 3x3 conv).
``dilate_last_stage`` is torchvision's ``replace_stride_with_dilation=[False, False, True]``, which
DeepLabV3+ uses for output stride 16; ``include_top=False`` drops ``avgpool``/``fc`` as its
IntermediateLayerGetter does.
"""

from __future__ import annotations

import torch
from torch import nn

EXPANSION = 4  # Bottleneck output channels = planes * 4


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (stride, dilation), 1x1 expand, plus the identity or a projected shortcut."""

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        dilation: int = 1,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(
            planes, planes, 3, stride=stride, padding=dilation, dilation=dilation, bias=False
        )
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * EXPANSION, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * EXPANSION)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet with Bottleneck blocks; ``width``: the stem width (64 in ResNet-50)."""

    def __init__(
        self,
        layers: tuple[int, int, int, int] = (3, 4, 6, 3),
        *,
        width: int = 64,
        num_classes: int = 1000,
        dilate_last_stage: bool = False,
        include_top: bool = True,
    ) -> None:
        super().__init__()
        self.inplanes = width
        self.dilation = 1
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(width * 8, layers[3], stride=2, dilate=dilate_last_stage)
        self.out_channels = width * 8 * EXPANSION
        self.low_level_channels = width * EXPANSION
        if include_top:
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(self.out_channels, num_classes)

    def _make_layer(
        self, planes: int, blocks: int, stride: int = 1, dilate: bool = False
    ) -> nn.Sequential:
        # torchvision: a dilated stage keeps the previous dilation in its first block
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.inplanes != planes * EXPANSION:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * EXPANSION, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * EXPANSION),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample, previous_dilation)]
        self.inplanes = planes * EXPANSION
        layers.extend(
            Bottleneck(self.inplanes, planes, dilation=self.dilation) for _ in range(1, blocks)
        )
        return nn.Sequential(*layers)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(layer1 output at stride 4, layer4 output): the low- and high-level maps DeepLab uses."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        low_level = self.layer1(x)
        return low_level, self.layer4(self.layer3(self.layer2(low_level)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, x = self.features(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(variant: str = "full") -> ResNet:
    """ResNet-50; the tiny variant keeps a projected and an identity block at 1/8 the width."""
    if variant == "tiny":
        return ResNet((1, 1, 1, 2), width=8)
    return ResNet()
