"""YOLOv3 (Darknet-53, LeakyReLU 0.1) in ultralytics/yolov3's Darknet layout, decoded to [1,N,85].

Why this layout: the LeakyReLU YOLOv3 checkpoints in PyTorch come from ultralytics/yolov3's
``Darknet(cfg/yolov3.cfg)`` (or Darknet's own ``yolov3.weights`` loaded into it), whose state_dict
is ``module_list.{i}.Conv2d.weight`` / ``module_list.{i}.BatchNorm2d.*`` with ``i`` the layer's
index in ``yolov3.cfg`` (107 layers: convs, shortcuts, routes, upsamples, 3 yolo layers at 82, 94,
106). The layer list is generated here rather than parsed from a cfg file, in the same order, so
the indices (and checkpoints) match. BatchNorm uses that code's eps=1e-4.

Decode as in its YOLOLayer at inference: everything through a sigmoid, then
``xy = (2 s - 0.5 + grid) * stride`` and ``wh = (2 s)^2 * anchor``; rows (cx, cy, w, h) in input
pixels, objectness, 80 class scores, ordered stride 32, 16, 8 (the cfg's yolo-layer order), and
within a scale by anchor, row, column. 416x416 gives 3 * (13^2 + 26^2 + 52^2) = 10647 rows.
"""

from __future__ import annotations

import torch
from torch import nn

ANCHORS = (
    (10, 13),
    (16, 30),
    (33, 23),
    (30, 61),
    (62, 45),
    (59, 119),
    (116, 90),
    (156, 198),
    (373, 326),
)
NUM_CLASSES = 80
BN_EPS = 1e-4
FULL_REPEATS = (1, 2, 8, 8, 4)  # Darknet-53's residual blocks per stage
# Priors on objectness and class logits so that a few untrained boxes clear a 0.25 threshold.
OBJECTNESS_PRIOR, CLASS_PRIOR = -3.0, -2.0


def _conv(c1: int, c2: int, k: int, s: int = 1) -> nn.Sequential:
    """A cfg ``[convolutional]`` with batch_normalize=1, activation=leaky."""
    block = nn.Sequential()
    block.add_module("Conv2d", nn.Conv2d(c1, c2, k, s, k // 2, bias=False))
    block.add_module("BatchNorm2d", nn.BatchNorm2d(c2, eps=BN_EPS, momentum=0.03))
    block.add_module("activation", nn.LeakyReLU(0.1, inplace=True))
    return block


def _prediction_conv(c1: int, c2: int) -> nn.Sequential:
    """The cfg's linear 1x1 ``[convolutional]`` before each ``[yolo]``: biased, no BN."""
    block = nn.Sequential()
    block.add_module("Conv2d", nn.Conv2d(c1, c2, 1, 1, 0, bias=True))
    with torch.no_grad():
        bias = block.Conv2d.bias.view(-1, NUM_CLASSES + 5)
        bias[:, 4] += OBJECTNESS_PRIOR
        bias[:, 5:] += CLASS_PRIOR
    return block


class Shortcut(nn.Module):
    """``[shortcut] from=-3``: add an earlier layer's output (parameter-free, like the original)."""

    def __init__(self, source: int) -> None:
        super().__init__()
        self.source = source

    def forward(self, x: torch.Tensor, outputs: list[torch.Tensor]) -> torch.Tensor:
        return x + outputs[self.source]


class Route(nn.Module):
    """``[route]``: one earlier layer's output, or several concatenated along channels."""

    def __init__(self, sources: list[int]) -> None:
        super().__init__()
        self.sources = sources

    def forward(self, x: torch.Tensor, outputs: list[torch.Tensor]) -> torch.Tensor:
        if len(self.sources) == 1:
            return outputs[self.sources[0]]
        return torch.cat([outputs[i] for i in self.sources], 1)


class YOLOLayer(nn.Module):
    """``[yolo]``: decode one scale's 3 x 85 channels to boxes in pixels and sigmoid scores."""

    def __init__(self, anchors: tuple[tuple[int, int], ...], stride: int, nc: int) -> None:
        super().__init__()
        self.na = len(anchors)
        self.no = nc + 5
        self.stride = stride
        pixels = torch.tensor(anchors, dtype=torch.float32).view(1, self.na, 1, 1, 2)
        self.register_buffer("anchor_wh", pixels, persistent=False)  # not in checkpoints

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        bs, _, ny, nx = p.shape
        p = p.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        xy, wh, scores = p.sigmoid().split((2, 2, self.no - 4), 4)
        y = torch.arange(ny, dtype=p.dtype, device=p.device)
        x = torch.arange(nx, dtype=p.dtype, device=p.device)
        yv, xv = torch.meshgrid(y, x, indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2)
        xy = (xy * 2.0 - 0.5 + grid) * self.stride
        wh = (wh * 2) ** 2 * self.anchor_wh
        return torch.cat((xy, wh, scores), 4).view(bs, -1, self.no)


class Darknet(nn.Module):
    """The cfg's layers in ``module_list``; forward keeps outputs for routes and shortcuts."""

    def __init__(self, module_list: list[nn.Module]) -> None:
        super().__init__()
        self.module_list = nn.ModuleList(module_list)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor] = []
        detections: list[torch.Tensor] = []
        for module in self.module_list:
            if isinstance(module, (Shortcut, Route)):
                x = module(x, outputs)
            elif isinstance(module, YOLOLayer):
                detections.append(module(x))
            else:
                x = module(x)
            outputs.append(x)
        return torch.cat(detections, 1)


class _CfgBuilder:
    """Appends cfg layers in order, tracking channels, so route/shortcut indices stay absolute."""

    def __init__(self) -> None:
        self.layers: list[nn.Module] = []
        self.channels: list[int] = []

    def add(self, module: nn.Module, channels: int) -> int:
        self.layers.append(module)
        self.channels.append(channels)
        return len(self.layers) - 1

    def conv(self, c2: int, k: int, s: int = 1) -> int:
        return self.add(_conv(self.channels[-1] if self.channels else 3, c2, k, s), c2)

    def residual(self, c: int) -> int:
        """Darknet's residual: 1x1 to c/2, 3x3 back to c, shortcut from=-3."""
        self.conv(c // 2, 1)
        self.conv(c, 3)
        return self.add(Shortcut(len(self.layers) - 3), c)

    def route(self, sources: list[int]) -> int:
        return self.add(Route(sources), sum(self.channels[i] for i in sources))


def _yolov3_layers(width: float, repeats: tuple[int, ...]) -> list[nn.Module]:
    """``yolov3.cfg``: Darknet-53, then three heads (stride 32, 16, 8) joined by upsample+route."""

    def ch(c: int) -> int:
        return max(int(c * width), 4)

    cfg = _CfgBuilder()
    cfg.conv(ch(32), 3)
    stage_outputs = []
    for stage, n in enumerate(repeats):
        cfg.conv(ch(64 << stage), 3, 2)
        for _ in range(n):
            last = cfg.residual(ch(64 << stage))
        stage_outputs.append(last)
    prediction_channels = 3 * (NUM_CLASSES + 5)
    masks = ((6, 7, 8), (3, 4, 5), (0, 1, 2))
    lateral = [None, stage_outputs[3], stage_outputs[2]]  # routes to Darknet's P4 and P3
    for scale, (mask, stride) in enumerate(zip(masks, (32, 16, 8), strict=True)):
        c = ch(512 >> scale)
        if scale > 0:
            cfg.route([len(cfg.layers) - 4])  # back to the 1x1 before the previous head's 3x3
            cfg.conv(c, 1)
            cfg.add(nn.Upsample(scale_factor=2.0, mode="nearest"), cfg.channels[-1])
            cfg.route([len(cfg.layers) - 1, lateral[scale]])
        for _ in range(3):
            cfg.conv(c, 1)
            cfg.conv(2 * c, 3)
        cfg.add(_prediction_conv(2 * c, prediction_channels), prediction_channels)
        cfg.add(YOLOLayer(tuple(ANCHORS[i] for i in mask), stride, NUM_CLASSES), 0)
    return cfg.layers


def yolov3(variant: str = "full") -> Darknet:
    """YOLOv3-416 with COCO's 80 classes; tiny: one residual per stage, width 0.25."""
    if variant == "tiny":
        return Darknet(_yolov3_layers(0.25, (1, 1, 1, 1, 1)))
    return Darknet(_yolov3_layers(1.0, FULL_REPEATS))
