"""Detector heads of each family in plain PyTorch, exported with torch.onnx (random weights).

Why written out here: torchvision and the projects themselves are not installed, and the point
is a graph shaped as each project exports it (the same output layout, the same ops at the end
of the head), so that the layout recognition reads a real export and the decode is compared
with an independent reference decode (``reference_decodes``) on the same outputs.

Each head sits on a tiny backbone (strided convs to strides 8, 16, 32, 64), and each follows
the export path of its project:

- YOLOX ``YOLOXHead`` (``decode_in_inference`` False: reg, obj.sigmoid, cls.sigmoid concatenated
  per level, flattened, levels concatenated, permuted to [1, N, 5 + C]; True: grids and strides
  applied in the graph, ``exp`` on the sizes);
- YOLOv10 ``v10Detect`` end-to-end: a one-to-one head, TopK over the best class score, TopK over
  the flattened scores, ``[1, K, 6]``;
- DETR (RT-DETR / D-FINE decoders' last layer): per-query linear class logits and sigmoid boxes
  normalised cx, cy, w, h; the scores optionally through a Sigmoid;
- PP-YOLOE ``exclude_nms``: DFL distances decoded in the graph to boxes [1, N, 4] and sigmoid
  scores [1, C, N];
- PicoDet ``PicoHeadV2`` with ``export_post_process=False``: per stride, sigmoid class scores
  [1, N_s, C] and raw DFL distributions [1, N_s, 4 (reg_max + 1)].
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

OPSET = 17


class Backbone(nn.Module):
    """Features at strides 8, 16, 32 (and 64): one strided conv per halving."""

    def __init__(self, width: int = 16, levels: int = 3, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale  # 1/255 for the families fed 0-255 pixels (YOLOX)
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(width, width, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(width, width, 3, 2, 1), nn.SiLU())
        self.downs = nn.ModuleList(nn.Sequential(nn.Conv2d(width, width, 3, 2, 1), nn.SiLU())
                                   for _ in range(levels - 1))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        features = [self.stem(x * self.scale)]
        for down in self.downs:
            features.append(down(features[-1]))
        return features


class YoloxHead(nn.Module):
    def __init__(self, classes: int, decode: bool, strides=(8, 16, 32), width: int = 16) -> None:
        super().__init__()
        self.backbone = Backbone(width, len(strides), scale=1 / 255)
        self.cls = nn.ModuleList(nn.Conv2d(width, classes, 1) for _ in strides)
        self.reg = nn.ModuleList(nn.Conv2d(width, 4, 1) for _ in strides)
        self.obj = nn.ModuleList(nn.Conv2d(width, 1, 1) for _ in strides)
        self.strides = strides
        self.decode = decode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs, sizes = [], []
        for i, feature in enumerate(self.backbone(x)):
            outputs.append(torch.cat([self.reg[i](feature), self.obj[i](feature).sigmoid(),
                                      self.cls[i](feature).sigmoid()], 1))
            sizes.append(feature.shape[-2:])
        out = torch.cat([o.flatten(start_dim=2) for o in outputs], dim=2).permute(0, 2, 1)
        if not self.decode:
            return out
        grids, strides = [], []
        for (h, w), stride in zip(sizes, self.strides, strict=True):
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grids.append(torch.stack((xs, ys), 2).view(1, -1, 2))
            strides.append(torch.full((1, h * w, 1), stride))
        grid = torch.cat(grids, 1).float()
        stride = torch.cat(strides, 1).float()
        return torch.cat([(out[..., :2] + grid) * stride, torch.exp(out[..., 2:4]) * stride,
                          out[..., 4:]], -1)


class V10Head(nn.Module):
    """One-to-one head: boxes xyxy in input pixels from per-level convs, then v10postprocess."""

    def __init__(self, classes: int, max_det: int = 100, width: int = 16) -> None:
        super().__init__()
        self.backbone = Backbone(width)
        self.cls = nn.ModuleList(nn.Conv2d(width, classes, 1) for _ in range(3))
        self.box = nn.ModuleList(nn.Conv2d(width, 4, 1) for _ in range(3))
        self.classes, self.max_det = classes, max_det

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        boxes, scores = [], []
        for i, feature in enumerate(self.backbone(x)):
            stride = 8 * 2 ** i
            h, w = feature.shape[-2:]
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            centre = (torch.stack((xs, ys), 0).float().view(1, 2, -1) + 0.5) * stride
            dist = self.box[i](feature).exp().view(1, 4, -1) * stride
            boxes.append(torch.cat([centre - dist[:, :2], centre + dist[:, 2:]], 1))
            scores.append(self.cls[i](feature).sigmoid().view(1, self.classes, -1))
        boxes = torch.cat(boxes, 2).permute(0, 2, 1)
        scores = torch.cat(scores, 2).permute(0, 2, 1)
        _, index = torch.topk(scores.amax(-1), self.max_det, dim=-1)
        index = index.unsqueeze(-1)
        boxes = torch.gather(boxes, 1, index.repeat(1, 1, 4))
        scores = torch.gather(scores, 1, index.repeat(1, 1, self.classes))
        scores, index = torch.topk(scores.flatten(1), self.max_det, dim=-1)
        labels = index % self.classes
        index = index // self.classes
        boxes = boxes.gather(1, index.unsqueeze(-1).repeat(1, 1, 4))
        return torch.cat([boxes, scores.unsqueeze(-1), labels.unsqueeze(-1).float()], -1)


class DetrHead(nn.Module):
    """Q query slots from pooled features; class logits (or sigmoid scores) and sigmoid boxes."""

    def __init__(self, classes: int, queries: int = 100, sigmoid: bool = False,
                 width: int = 16) -> None:
        super().__init__()
        self.backbone = Backbone(width)
        self.pool = nn.AdaptiveAvgPool2d((10, queries // 10))
        self.embed = nn.Linear(width, 32)
        self.logits = nn.Linear(32, classes)
        self.boxes = nn.Linear(32, 4)
        self.sigmoid = sigmoid

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.pool(self.backbone(x)[0]).flatten(2).permute(0, 2, 1)
        hidden = torch.relu(self.embed(tokens))
        logits = self.logits(hidden)
        return (logits.sigmoid() if self.sigmoid else logits), self.boxes(hidden).sigmoid()


class DflHeads(nn.Module):
    """Per-stride class and DFL convs, as PicoHeadV2 / PPYOLOEHead."""

    def __init__(self, classes: int, reg_max: int, strides, width: int = 16) -> None:
        super().__init__()
        self.backbone = Backbone(width, len(strides))
        self.cls = nn.ModuleList(nn.Conv2d(width, classes, 1) for _ in strides)
        self.reg = nn.ModuleList(nn.Conv2d(width, 4 * (reg_max + 1), 1) for _ in strides)
        self.classes, self.reg_max, self.strides = classes, reg_max, strides


class PicoRawHead(DflHeads):
    """``export_post_process=False``: (scores per stride..., distributions per stride...)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scores, dists = [], []
        for i, feature in enumerate(self.backbone(x)):
            scores.append(self.cls[i](feature).sigmoid().reshape(1, self.classes, -1)
                          .transpose(1, 2))
            dists.append(self.reg[i](feature).reshape(1, 4 * (self.reg_max + 1), -1)
                         .transpose(1, 2))
        return (*scores, *dists)


class PpyoloeHead(DflHeads):
    """``exclude_nms``: boxes [1, N, 4] xyxy in input pixels, scores [1, C, N]."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        boxes, scores = [], []
        project = torch.arange(self.reg_max + 1, dtype=torch.float32)
        for i, feature in enumerate(self.backbone(x)):
            stride = self.strides[i]
            h, w = feature.shape[-2:]
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            anchor = torch.stack((xs, ys), -1).float().view(-1, 2) + 0.5
            dist = self.reg[i](feature).view(1, 4, self.reg_max + 1, -1).permute(0, 3, 1, 2)
            dist = (dist.softmax(-1) * project).sum(-1)[0]
            boxes.append(torch.cat([anchor - dist[:, :2], anchor + dist[:, 2:]], -1) * stride)
            scores.append(self.cls[i](feature).sigmoid().view(1, self.classes, -1))
        return torch.cat(boxes, 0).unsqueeze(0), torch.cat(scores, 2)


def export(module: nn.Module, path: Path, size: tuple[int, int], output_names: list[str],
           seed: int = 0, gain: float = 1.5) -> Path:
    """``module`` with seeded random weights (conv/linear weights x ``gain``) as ONNX."""
    torch.manual_seed(seed)
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(layer.weight, std=gain / layer.weight[0].numel() ** 0.5)
            nn.init.normal_(layer.bias, std=0.5)
    module.eval()
    torch.onnx.export(module, (torch.rand(1, 3, *size),), str(path), opset_version=OPSET,
                      dynamo=False, input_names=["images"], output_names=output_names)
    return path
