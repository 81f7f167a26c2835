"""YOLOv8's training loss in plain PyTorch: task-aligned assignment, BCE, CIoU and DFL.

Why a re-implementation: ultralytics is not a dependency, and the catalogue's YOLOv8 graph decodes
boxes in its forward (its inference output [B, 4 + C, N] is what apps read). Training needs the
raw head instead: per anchor 4 x 16 distance bins and C class logits. ``raw_head`` runs the layer
graph up to the Detect module and applies its branches without decoding.

The loss follows ultralytics' ``v8DetectionLoss`` (Feng et al., TOOD 2021, for the assigner):
1. align = score(gt class)^0.5 * CIoU(pred, gt)^6 over anchors whose centre lies inside the gt;
   each gt takes its top 10 anchors (ties go to anchors inside it); an anchor claimed by several
   gts keeps the best-overlapping.
2. class targets = one-hot * align normalised per gt so its best anchor gets its best IoU;
   BCE on the logits, summed and divided by the sum of the targets.
3. on positive anchors, weighted by their target score: 1 - CIoU of the decoded box, and DFL
   (cross-entropy on the two bins around the target distance, linearly interpolated).
Total = 7.5 box + 0.5 class + 1.5 DFL (ultralytics' default gains).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from edgefuse.models.yolov8 import REG_MAX, STRIDES, make_anchors

TOPK, ALPHA, BETA = 10, 0.5, 6.0
BOX_GAIN, CLASS_GAIN, DFL_GAIN = 7.5, 0.5, 1.5
EPS = 1e-9


def raw_head(graph: nn.Module, images: torch.Tensor):
    """Bin logits [B, A, 64], class logits [B, A, C], anchor centres [A, 2] px, strides [A, 1]."""
    outputs: list[torch.Tensor | None] = []
    x = images
    layers = list(graph.model)
    for module in layers[:-1]:
        if module.f != -1:
            x = [x if j == -1 else outputs[j] for j in module.f]
        x = module(x)
        outputs.append(x if module.i in graph.save else None)
    detect = layers[-1]
    features = [outputs[j] for j in detect.f]
    batch = images.shape[0]
    heads = [
        torch.cat((detect.cv2[i](f), detect.cv3[i](f)), 1).view(batch, detect.no, -1)
        for i, f in enumerate(features)
    ]
    raw = torch.cat(heads, 2).permute(0, 2, 1)
    anchors, strides = make_anchors(features, STRIDES, 0.5)
    distances, logits = raw.split((4 * REG_MAX, detect.nc), 2)
    return distances, logits, anchors * strides, strides


def decode_distances(distances: torch.Tensor) -> torch.Tensor:
    """[B, A, 64] bin logits -> [B, A, 4] expected (left, top, right, bottom) in grid units."""
    batch, anchors, _ = distances.shape
    bins = torch.arange(REG_MAX, dtype=distances.dtype, device=distances.device)
    return distances.view(batch, anchors, 4, REG_MAX).softmax(3).matmul(bins)


def ciou(box1: torch.Tensor, box2: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Complete IoU of xyxy boxes, elementwise over the leading dimensions."""
    b1x1, b1y1, b1x2, b1y2 = box1.unbind(-1)
    b2x1, b2y1, b2x2, b2y2 = box2.unbind(-1)
    w1, h1 = b1x2 - b1x1, b1y2 - b1y1 + eps
    w2, h2 = b2x2 - b2x1, b2y2 - b2y1 + eps
    inter = (torch.minimum(b1x2, b2x2) - torch.maximum(b1x1, b2x1)).clamp(0) * (
        torch.minimum(b1y2, b2y2) - torch.maximum(b1y1, b2y1)
    ).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.maximum(b1x2, b2x2) - torch.minimum(b1x1, b2x1)
    ch = torch.maximum(b1y2, b2y2) - torch.minimum(b1y1, b2y1)
    diagonal = cw**2 + ch**2 + eps
    centre = ((b2x1 + b2x2 - b1x1 - b1x2) ** 2 + (b2y1 + b2y2 - b1y1 - b1y2) ** 2) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (centre / diagonal + v * alpha)


@torch.no_grad()
def assign(
    scores: torch.Tensor,
    boxes: torch.Tensor,
    anchor_points: torch.Tensor,
    gt_labels: torch.Tensor,
    gt_boxes: torch.Tensor,
    gt_valid: torch.Tensor,
):
    """Task-aligned assignment; returns target boxes [B, A, 4], target scores [B, A, C], fg [B, A].

    ``scores`` [B, A, C] sigmoid, ``boxes`` [B, A, 4] xyxy px (both detached), ``gt_*`` padded to
    [B, M, ...] with ``gt_valid`` [B, M] marking real boxes.
    """
    batch, anchors, classes = scores.shape
    count = gt_boxes.shape[1]
    if count == 0:
        return (torch.zeros_like(boxes), torch.zeros_like(scores),
                torch.zeros(batch, anchors, dtype=torch.bool))
    points = anchor_points[None, None]
    inside = torch.cat(
        (points - gt_boxes[:, :, None, :2], gt_boxes[:, :, None, 2:] - points), -1
    ).amin(-1) > EPS
    candidate = inside & gt_valid[:, :, None]  # [B, M, A]
    labels = gt_labels.clamp(min=0)
    class_scores = scores.gather(2, labels[:, None, :].expand(batch, anchors, count))
    class_scores = class_scores.permute(0, 2, 1)  # [B, M, A]
    overlaps = ciou(gt_boxes[:, :, None, :], boxes[:, None, :, :]).clamp(0) * candidate
    align = class_scores.pow(ALPHA) * overlaps.pow(BETA) * candidate
    # The EPS bonus breaks ties among all-zero scores in favour of anchors inside the gt.
    top = (align + EPS * candidate).topk(min(TOPK, anchors), dim=-1).indices
    positive = torch.zeros_like(candidate).scatter_(-1, top, True) & candidate
    several = positive.sum(1, keepdim=True) > 1  # [B, 1, A]
    if several.any():
        best = F.one_hot(overlaps.argmax(1), count).permute(0, 2, 1).bool()
        positive = torch.where(several, best, positive)
    foreground = positive.any(1)
    target_gt = positive.float().argmax(1)  # [B, A]
    target_labels = labels.gather(1, target_gt)
    target_boxes = gt_boxes.gather(1, target_gt[..., None].expand(-1, -1, 4))
    align = align * positive
    best_align = align.amax(-1, keepdim=True)
    best_overlap = (overlaps * positive).amax(-1, keepdim=True)
    normalised = (align * best_overlap / (best_align + EPS)).amax(1)  # [B, A]
    target_scores = F.one_hot(target_labels, classes).to(scores.dtype)
    target_scores = target_scores * (normalised * foreground)[..., None]
    return target_boxes, target_scores, foreground


def pad_targets(boxes: list, classes: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-image box lists -> [B, M, 4], [B, M] labels (-1 padding), [B, M] validity."""
    count = max((len(b) for b in boxes), default=0)
    batch = len(boxes)
    gt_boxes = torch.zeros(batch, count, 4)
    gt_labels = torch.full((batch, count), -1, dtype=torch.long)
    for i, (image_boxes, image_classes) in enumerate(zip(boxes, classes, strict=True)):
        gt_boxes[i, : len(image_boxes)] = torch.as_tensor(image_boxes)
        gt_labels[i, : len(image_classes)] = torch.as_tensor(image_classes)
    return gt_boxes, gt_labels, gt_labels >= 0


def detection_loss(graph: nn.Module, images: torch.Tensor, boxes: list, classes: list):
    """The total loss and its parts (box, class, dfl) for one batch."""
    distances, logits, anchor_points, strides = raw_head(graph, images)
    grid_points = anchor_points / strides
    ltrb = decode_distances(distances)
    pred_boxes = torch.cat((grid_points - ltrb[..., :2], grid_points + ltrb[..., 2:]), -1)
    pred_boxes_px = pred_boxes * strides
    gt_boxes, gt_labels, gt_valid = pad_targets(boxes, classes)
    target_boxes, target_scores, foreground = assign(
        logits.detach().sigmoid(), pred_boxes_px.detach(), anchor_points, gt_labels, gt_boxes,
        gt_valid,
    )
    total_score = target_scores.sum().clamp(min=1.0)
    class_loss = F.binary_cross_entropy_with_logits(
        logits, target_scores, reduction="sum"
    ) / total_score
    if foreground.any():
        weight = target_scores.sum(-1)[foreground]
        iou = ciou(pred_boxes_px[foreground], target_boxes[foreground])
        box_loss = ((1.0 - iou) * weight).sum() / total_score
        stride_of = strides.expand(foreground.shape[0], -1, -1)[foreground]  # [P, 1]
        points = grid_points.expand(foreground.shape[0], -1, -1)[foreground]
        target = target_boxes[foreground] / stride_of
        target_ltrb = torch.cat((points - target[:, :2], target[:, 2:] - points), -1)
        dfl = _dfl(distances[foreground].view(-1, REG_MAX), target_ltrb.clamp(0, REG_MAX - 1.01))
        dfl_loss = (dfl.view(-1, 4).mean(-1) * weight).sum() / total_score
    else:
        box_loss = dfl_loss = logits.sum() * 0.0
    total = BOX_GAIN * box_loss + CLASS_GAIN * class_loss + DFL_GAIN * dfl_loss
    return total, (float(box_loss.detach()), float(class_loss.detach()), float(dfl_loss.detach()))


def _dfl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    target = target.reshape(-1)
    left = target.long()
    right = left + 1
    weight_left = right.to(target.dtype) - target
    return (F.cross_entropy(logits, left, reduction="none") * weight_left
            + F.cross_entropy(logits, right, reduction="none") * (1 - weight_left))
