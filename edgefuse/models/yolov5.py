"""YOLOv5s (ultralytics v6.0+) with its anchor-based Detect head decoded to [1, N, 85].

Why this shape: YOLOv5 is still the detector most often taken to Ascend boards, and its export graph
is the test for a converter: C3 blocks (CSP bottlenecks with and without shortcut), SPPF's chained
max-pools, a PANet of Upsample/Concat, and a Detect head whose decode (sigmoid, grid offsets,
anchor scaling, reshape/permute/concat) is where fused and FP16 graphs go wrong.

Layout and names follow ``models/yolov5s.yaml`` parsed by ultralytics' ``parse_model``:
``model.0`` .. ``model.24``, ``model.24.m.0`` the per-scale 1x1 convs and the persistent buffer
``model.24.anchors`` (in grid units), so an ultralytics ``yolov5s.pt`` state_dict loads as is.
Output rows are (cx, cy, w, h) in input pixels, objectness, then 80 class scores, all sigmoids,
ordered P3 (stride 8), P4, P5, and within a scale by anchor, row, column.
"""

from __future__ import annotations

import torch
from torch import nn

from edgefuse.models._yolo_blocks import (
    SPPF,
    Concat,
    Conv,
    LayerGraph,
    scale_channels,
    scale_depth,
    upsample,
)

ANCHORS = (
    (10, 13, 16, 30, 33, 23),  # P3/8
    (30, 61, 62, 45, 59, 119),  # P4/16
    (116, 90, 156, 198, 373, 326),  # P5/32
)
STRIDES = (8, 16, 32)
NUM_CLASSES = 80
# Priors on the objectness and class logits, so that an untrained model scores most boxes low
# and a few above 0.25 (ultralytics' own priors put every score under 1e-3).
OBJECTNESS_PRIOR, CLASS_PRIOR = -3.0, -2.0


class Bottleneck(nn.Module):
    """1x1 then 3x3 Conv, plus the input when ``shortcut`` and the channels agree."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True, e: float = 0.5) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = Conv(c1, hidden, 1, 1)
        self.cv2 = Conv(hidden, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP bottleneck with three convs: ``cv3(cat(m(cv1(x)), cv2(x)))``."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        hidden = int(c2 * 0.5)
        self.cv1 = Conv(c1, hidden, 1, 1)
        self.cv2 = Conv(c1, hidden, 1, 1)
        self.cv3 = Conv(2 * hidden, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(hidden, hidden, shortcut, e=1.0) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class Detect(nn.Module):
    """Per scale a 1x1 conv to 3 anchors x 85, decoded like ultralytics' Detect in export mode."""

    def __init__(self, nc: int, anchors: tuple[tuple[int, ...], ...], ch: tuple[int, ...]) -> None:
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        grid_units = [  # as ultralytics saves them (strides are powers of 2: exact)
            [(w / s, h / s) for w, h in zip(a[::2], a[1::2], strict=True)]
            for a, s in zip(anchors, STRIDES, strict=True)
        ]
        self.register_buffer("anchors", torch.tensor(grid_units, dtype=torch.float32))
        self.register_buffer("stride", torch.tensor(STRIDES, dtype=torch.float32), persistent=False)
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        with torch.no_grad():
            for conv in self.m:
                bias = conv.bias.view(self.na, self.no)
                bias[:, 4] += OBJECTNESS_PRIOR
                bias[:, 5:] += CLASS_PRIOR

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        decoded = []
        for i, x in enumerate(xs):
            x = self.m[i](x)
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            xy, wh, conf = x.sigmoid().split((2, 2, self.nc + 1), 4)
            grid, anchor_grid = self._make_grid(nx, ny, i)
            xy = (xy * 2 + grid) * self.stride[i]
            wh = (wh * 2) ** 2 * anchor_grid
            decoded.append(torch.cat((xy, wh, conf), 4).view(bs, self.na * ny * nx, self.no))
        return torch.cat(decoded, 1)

    def _make_grid(self, nx: int, ny: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cell offsets (minus 0.5, the decode's centre shift) and anchor sizes in pixels."""
        shape = (1, self.na, ny, nx, 2)
        y = torch.arange(ny, dtype=self.anchors.dtype, device=self.anchors.device)
        x = torch.arange(nx, dtype=self.anchors.dtype, device=self.anchors.device)
        yv, xv = torch.meshgrid(y, x, indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(shape) - 0.5
        anchor_grid = (self.anchors[i] * self.stride[i]).view(1, self.na, 1, 1, 2).expand(shape)
        return grid, anchor_grid


def _layers(depth: float, width: float) -> list[tuple[int | list[int], nn.Module]]:
    """``yolov5s.yaml`` (v6.0+) with its depth and width multiples applied."""
    c1, c2, c3, c4, c5 = (scale_channels(c, width) for c in (64, 128, 256, 512, 1024))

    def n(repeats: int) -> int:
        return scale_depth(repeats, depth)

    return [
        (-1, Conv(3, c1, 6, 2, 2)),  # 0 P1/2
        (-1, Conv(c1, c2, 3, 2)),  # 1 P2/4
        (-1, C3(c2, c2, n(3))),
        (-1, Conv(c2, c3, 3, 2)),  # 3 P3/8
        (-1, C3(c3, c3, n(6))),
        (-1, Conv(c3, c4, 3, 2)),  # 5 P4/16
        (-1, C3(c4, c4, n(9))),
        (-1, Conv(c4, c5, 3, 2)),  # 7 P5/32
        (-1, C3(c5, c5, n(3))),
        (-1, SPPF(c5, c5, 5)),  # 9
        (-1, Conv(c5, c4, 1, 1)),  # 10
        (-1, upsample()),
        ([-1, 6], Concat()),  # cat backbone P4
        (-1, C3(2 * c4, c4, n(3), shortcut=False)),  # 13
        (-1, Conv(c4, c3, 1, 1)),  # 14
        (-1, upsample()),
        ([-1, 4], Concat()),  # cat backbone P3
        (-1, C3(2 * c3, c3, n(3), shortcut=False)),  # 17 (P3/8 small)
        (-1, Conv(c3, c3, 3, 2)),
        ([-1, 14], Concat()),  # cat head P4
        (-1, C3(2 * c3, c4, n(3), shortcut=False)),  # 20 (P4/16 medium)
        (-1, Conv(c4, c4, 3, 2)),
        ([-1, 10], Concat()),  # cat head P5
        (-1, C3(2 * c4, c5, n(3), shortcut=False)),  # 23 (P5/32 large)
        ([17, 20, 23], Detect(NUM_CLASSES, ANCHORS, (c3, c4, c5))),
    ]


def yolov5s(variant: str = "full") -> LayerGraph:
    """YOLOv5s (depth 0.33, width 0.50); tiny: one repeat per C3, width 0.125."""
    if variant == "tiny":
        return LayerGraph(_layers(depth=0.01, width=0.125))
    return LayerGraph(_layers(depth=0.33, width=0.50))
