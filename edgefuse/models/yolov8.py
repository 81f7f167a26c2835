"""YOLOv8n (ultralytics) with its anchor-free, decoupled Detect head decoded to [1, 84, N].

Why this shape: YOLOv8's head is the other common detector graph: per scale two 3-conv branches
(box distribution and class logits), a DFL that softmaxes 16 distance bins and takes their mean
with a fixed 1x1 conv, then ``dist2bbox`` against anchor points from ``make_anchors``. Graphs
with Split/Softmax/Transpose on the head and a channels-first output are what converters and FP16
conversion have to get right here, and C2f (split, chained bottlenecks, concat) is the backbone's
block.

Layout and names follow ``yolov8.yaml`` at scale n through ultralytics' ``parse_model``:
``model.0`` .. ``model.22``, with ``model.22.cv2.i`` (box), ``model.22.cv3.i`` (class) and
``model.22.dfl.conv`` (the fixed 0..15 weights, not trained), so an ultralytics ``yolov8n.pt``
state_dict loads as is. Output: [1, 84, N], rows (cx, cy, w, h) in input pixels then 80 sigmoid
class scores; columns P3 (stride 8), P4, P5, each row-major.
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
from edgefuse.models.shapes import DETECTOR_DEPTH, DETECTOR_WIDTH
from edgefuse.models.shapes import NUM_CLASSES as SHAPE_CLASSES

STRIDES = (8, 16, 32)
NUM_CLASSES = 80
REG_MAX = 16
BOX_PRIOR = 1.0  # ultralytics' bias_init on the box branch
# ultralytics' class prior puts every untrained score under 1e-4; this one leaves a few above 0.25.
CLASS_PRIOR = -5.0


class Bottleneck(nn.Module):
    """Two 3x3 Convs, plus the input when ``shortcut`` and the channels agree."""

    def __init__(self, c1: int, c2: int, shortcut: bool = True) -> None:
        super().__init__()
        self.cv1 = Conv(c1, c2, 3, 1)
        self.cv2 = Conv(c2, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """CSP, two convs: split ``cv1(x)`` in halves, chain bottlenecks on the second, concat all."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.c = int(c2 * 0.5)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).split((self.c, self.c), 1))
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2(torch.cat(y, 1))


class DFL(nn.Module):
    """Distribution focal loss integral: softmax over the bins, then their mean via a fixed conv."""

    def __init__(self, c1: int = REG_MAX) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.arange(c1, dtype=torch.float32).view(1, c1, 1, 1))
        self.c1 = c1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(
    feats: list[torch.Tensor], strides: tuple[int, ...], offset: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cell centres (x, y) of every scale in grid units, and each cell's stride: [A, 2], [A, 1].

    Shapes come from the feature maps, so export sees fixed sizes and folds the grid to constants.
    """
    points, stride_column = [], []
    dtype, device = feats[0].dtype, feats[0].device
    for feat, stride in zip(feats, strides, strict=True):
        _, _, h, w = feat.shape
        sx = torch.arange(w, device=device, dtype=dtype) + offset
        sy = torch.arange(h, device=device, dtype=dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_column.append(torch.full((h * w, 1), float(stride), dtype=dtype, device=device))
    return torch.cat(points), torch.cat(stride_column)


def dist2bbox(distance: torch.Tensor, anchor_points: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """(left, top, right, bottom) distances from anchor points to (cx, cy, w, h)."""
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)


class Detect(nn.Module):
    """Decoupled head: per scale a box branch (4 x 16 bins) and a class branch, DFL, dist2bbox."""

    def __init__(self, nc: int, ch: tuple[int, ...]) -> None:
        super().__init__()
        self.nc = nc
        self.nl = len(ch)
        self.reg_max = REG_MAX
        self.no = nc + REG_MAX * 4
        c2 = max(16, ch[0] // 4, REG_MAX * 4)
        c3 = max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * REG_MAX, 1))
            for c in ch
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in ch
        )
        self.dfl = DFL(REG_MAX)
        with torch.no_grad():
            for box, cls in zip(self.cv2, self.cv3, strict=True):
                box[-1].bias.fill_(BOX_PRIOR)
                cls[-1].bias.fill_(CLASS_PRIOR)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        xs = [torch.cat((self.cv2[i](x), self.cv3[i](x)), 1) for i, x in enumerate(xs)]
        batch = xs[0].shape[0]
        x_cat = torch.cat([x.view(batch, self.no, -1) for x in xs], 2)
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(xs, STRIDES, 0.5))
        box, cls = x_cat.split((self.reg_max * 4, self.nc), 1)
        dbox = dist2bbox(self.dfl(box), anchors.unsqueeze(0), dim=1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


def _layers(
    depth: float, width: float, num_classes: int
) -> list[tuple[int | list[int], nn.Module]]:
    """``yolov8.yaml`` with a scale's depth and width applied (max channels 1024)."""
    c1, c2, c3, c4, c5 = (scale_channels(c, width) for c in (64, 128, 256, 512, 1024))

    def n(repeats: int) -> int:
        return scale_depth(repeats, depth)

    return [
        (-1, Conv(3, c1, 3, 2)),  # 0 P1/2
        (-1, Conv(c1, c2, 3, 2)),  # 1 P2/4
        (-1, C2f(c2, c2, n(3), shortcut=True)),
        (-1, Conv(c2, c3, 3, 2)),  # 3 P3/8
        (-1, C2f(c3, c3, n(6), shortcut=True)),
        (-1, Conv(c3, c4, 3, 2)),  # 5 P4/16
        (-1, C2f(c4, c4, n(6), shortcut=True)),
        (-1, Conv(c4, c5, 3, 2)),  # 7 P5/32
        (-1, C2f(c5, c5, n(3), shortcut=True)),
        (-1, SPPF(c5, c5, 5)),  # 9
        (-1, upsample()),
        ([-1, 6], Concat()),  # cat backbone P4
        (-1, C2f(c5 + c4, c4, n(3))),  # 12
        (-1, upsample()),
        ([-1, 4], Concat()),  # cat backbone P3
        (-1, C2f(c4 + c3, c3, n(3))),  # 15 (P3/8 small)
        (-1, Conv(c3, c3, 3, 2)),
        ([-1, 12], Concat()),  # cat head P4
        (-1, C2f(c3 + c4, c4, n(3))),  # 18 (P4/16 medium)
        (-1, Conv(c4, c4, 3, 2)),
        ([-1, 9], Concat()),  # cat head P5
        (-1, C2f(c4 + c5, c5, n(3))),  # 21 (P5/32 large)
        ([15, 18, 21], Detect(num_classes, (c3, c4, c5))),
    ]


def yolov8(*, depth: float, width: float, num_classes: int = NUM_CLASSES) -> LayerGraph:
    """``yolov8.yaml`` at any depth, width and class count (the output has 4 + C rows)."""
    return LayerGraph(_layers(depth, width, num_classes))


def yolov8n(variant: str = "full") -> LayerGraph:
    """YOLOv8n (depth 0.33, width 0.25); tiny: one repeat per C2f, width 0.125."""
    if variant == "tiny":
        return yolov8(depth=0.01, width=0.125)
    return yolov8(depth=0.33, width=0.25)


def yolov8_shapes(variant: str = "full") -> LayerGraph:
    """The shapes detector's layout (depth 0.33, width 0.125, 6 classes); tiny is the same."""
    return yolov8(depth=DETECTOR_DEPTH, width=DETECTOR_WIDTH, num_classes=SHAPE_CLASSES)
