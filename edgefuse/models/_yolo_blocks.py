"""What YOLOv5 and YOLOv8 share, under ultralytics' names: Conv, Concat, SPPF, the layer graph.

Why shared: both ultralytics generations build ``model = nn.Sequential(layer 0, layer 1, ...)``
where each layer names the earlier layers it reads (``f``, "from"), and both use the same
Conv (Conv2d without bias + BatchNorm(eps=1e-3) + SiLU, ``conv``/``bn``/``act``) and SPPF. Keeping
one copy keeps the two families' state_dict keys (``model.N.conv.weight``) identical by
construction.
"""

from __future__ import annotations

import math

import torch
from torch import nn

BN_EPS = 1e-3  # ultralytics' initialize_weights() sets eps=1e-3 on every BatchNorm2d


def scale_channels(channels: int, width: float, max_channels: int = 1024) -> int:
    """ultralytics' width scaling: capped, multiplied, rounded up to a multiple of 8."""
    return math.ceil(min(channels, max_channels) * width / 8) * 8


def scale_depth(repeats: int, depth: float) -> int:
    """ultralytics' depth scaling: at least one repeat."""
    return max(round(repeats * depth), 1)


class Conv(nn.Module):
    """Conv2d (no bias, 'same' padding for odd kernels) + BatchNorm2d + SiLU."""

    def __init__(
        self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Concat(nn.Module):
    """Concatenate the layers named in ``f`` along channels."""

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(xs, 1)


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max-pools, concatenated, projected."""

    def __init__(self, c1: int, c2: int, k: int = 5) -> None:
        super().__init__()
        hidden = c1 // 2
        self.cv1 = Conv(c1, hidden, 1, 1)
        self.cv2 = Conv(hidden * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


def upsample() -> nn.Upsample:
    return nn.Upsample(scale_factor=2.0, mode="nearest")


class LayerGraph(nn.Module):
    """ultralytics' DetectionModel forward: ``model`` holds the layers, each reading ``f``.

    ``f`` is -1 (the previous layer) or a list of layer indices (-1 again meaning the previous one).
    Only outputs some later layer reads are kept.
    """

    def __init__(self, layers: list[tuple[int | list[int], nn.Module]]) -> None:
        super().__init__()
        for index, (source, module) in enumerate(layers):
            module.f, module.i = source, index
        self.model = nn.Sequential(*(module for _, module in layers))
        self.save = sorted(
            {j for source, _ in layers if isinstance(source, list) for j in source if j != -1}
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor | None] = []
        for module in self.model:
            if module.f != -1:
                x = [x if j == -1 else outputs[j] for j in module.f]
            x = module(x)
            outputs.append(x if module.i in self.save else None)
        return x
