"""Segmentation heads written in plain PyTorch and exported with torch.onnx, for the decode tests.

``YoloV8SegLike`` has the structure of Ultralytics' ``Segment`` head on two strides: per anchor a
box (anchor point -/+ softplus distances x stride, as ``dist2bbox``, then cx, cy, w, h), sigmoid
class scores and 32 mask coefficients, concatenated ``[1, 4+C+32, N]``; prototypes
``[1, 32, H/4, W/4]`` from an upsampled feature map. ``SalientLike`` ends in ``Sigmoid`` at a
quarter of the input size (U^2-Net-p's output is a sigmoid map); ``SemanticLike`` gives class
logits at an eighth, NCHW or NHWC. Random weights (seeded): the tests compare the app's decode
with an independent reference on the same outputs, not with truth.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from tests.needs import optional

torch = optional("torch")
nn = torch.nn
F = torch.nn.functional

COEFFICIENTS = 32


class YoloV8SegLike(nn.Module):
    def __init__(self, classes: int = 3, size: int = 64) -> None:
        super().__init__()
        self.classes = classes
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())  # stride 4
        self.down8 = nn.Sequential(nn.Conv2d(16, 24, 3, 2, 1), nn.SiLU())
        self.down16 = nn.Sequential(nn.Conv2d(24, 24, 3, 2, 1), nn.SiLU())
        self.box = nn.ModuleList(nn.Conv2d(24, 4, 1) for _ in range(2))
        self.cls = nn.ModuleList(nn.Conv2d(24, classes, 1) for _ in range(2))
        self.coef = nn.ModuleList(nn.Conv2d(24, COEFFICIENTS, 1) for _ in range(2))
        self.proto = nn.Sequential(nn.Conv2d(16, 32, 3, 1, 1), nn.SiLU(),
                                   nn.Conv2d(32, COEFFICIENTS, 1))
        anchors, strides = [], []
        for stride in (8, 16):
            cells = size // stride
            ys, xs = torch.meshgrid(torch.arange(cells), torch.arange(cells), indexing="ij")
            anchors.append(torch.stack([xs, ys], 0).reshape(2, -1).float() + 0.5)
            strides.append(torch.full((1, cells * cells), float(stride)))
        self.register_buffer("anchors", torch.cat(anchors, 1))
        self.register_buffer("strides", torch.cat(strides, 1))

    def forward(self, x):
        stem = self.stem(x)
        levels = [self.down8(stem)]
        levels.append(self.down16(levels[0]))
        box = torch.cat([h(f).flatten(2) for h, f in zip(self.box, levels, strict=True)], 2)
        cls = torch.cat([h(f).flatten(2) for h, f in zip(self.cls, levels, strict=True)], 2)
        coef = torch.cat([h(f).flatten(2) for h, f in zip(self.coef, levels, strict=True)], 2)
        distances = F.softplus(box + 1.0)
        lt, rb = distances.chunk(2, 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        xywh = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.strides
        predictions = torch.cat([xywh, torch.sigmoid(cls), coef], 1)
        return predictions, self.proto(stem)


class SalientLike(nn.Module):
    """[1, 3, S, S] -> [1, 1, S/4, S/4] probabilities (the graph ends in Sigmoid)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 1, 3, 2, 1))

    def forward(self, x):
        return torch.sigmoid(self.body(x))


class SemanticLike(nn.Module):
    """[1, 3, S, S] -> class logits at S/8, [1, C, h, w] or (``nhwc``) [1, h, w, C]."""

    def __init__(self, classes: int = 4, nhwc: bool = False) -> None:
        super().__init__()
        self.nhwc = nhwc
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.ReLU(),
                                  nn.Conv2d(8, classes, 3, 2, 1))

    def forward(self, x):
        logits = self.body(x)
        return logits.permute(0, 2, 3, 1) if self.nhwc else logits


def export(module, path: Path, size: int = 64, outputs: tuple[str, ...] = ("output0",),
           seed: int = 0, scale: float = 1.0, bias: float = 0.5) -> onnx.ModelProto:
    """Seeded weights (Conv weights times ``scale``, biases of deviation ``bias``), exported
    with torch.onnx (opset 17)."""
    torch.manual_seed(seed)
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.normal_(layer.weight, std=scale / np.sqrt(layer.weight[0].numel()))
            nn.init.normal_(layer.bias, std=bias)
    module.eval()
    torch.onnx.export(module, (torch.zeros(1, 3, size, size),), str(path), dynamo=False,
                      opset_version=17, input_names=["images"], output_names=list(outputs))
    return onnx.load(str(path))
