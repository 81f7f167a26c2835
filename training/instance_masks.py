"""Train the mask branch of ``shapes_yolov8_seg`` on the frozen shapes detector, and score it.

Why this loss (Ultralytics' ``v8SegmentationLoss.single_mask_loss``): for an anchor assigned to
a ground-truth object, the predicted mask is ``coefficients @ prototypes`` at prototype
resolution (a quarter of the input), compared with the object's own mask by binary cross-entropy
on the logits, only inside the object's box (scaled to the prototype grid), averaged over the
box's area. Anchors are assigned as the trained detector fires: the anchor points that fall on
the object's visible pixels at every stride (at most ``ANCHORS_PER_OBJECT``, drawn at random
with the step's seed), or the nearest anchor point when none does, so whichever anchor NMS keeps
at inference has learnt the object's coefficients.

The detector runs in eval mode under ``no_grad``: its boxes, scores and BatchNorm statistics are
the shipped ones. Batches are a function of the step (scenes ``step * batch ...`` of the
generator seed), held-out scenes come from ``training.data.held_out``, so a run is reproducible.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import cv2
import numpy as np
import torch
from torch.nn import functional as F

from edgefuse.models import shapes
from edgefuse.models.yolov8 import STRIDES, make_anchors
from edgefuse.models.yolov8_seg import COEFFICIENTS, InstanceSegmenter
from edgefuse.preprocess import letterbox as frame_letterbox
from edgefuse.vision.detect.decode import DetectOptions
from edgefuse.vision.segment import instances
from training.data import detector_input, held_out, scene

ANCHORS_PER_OBJECT = 8
PROTO_STRIDE = 4


@dataclasses.dataclass(frozen=True)
class MaskPlan:
    steps: int
    batch: int
    lr: float
    seed: int
    scene_seed: int


@dataclasses.dataclass
class MaskBatch:
    images: torch.Tensor  # float32 [B, 3, H, W], the detector's input
    instances: list[np.ndarray]  # per image int32 [H, W] at input size: 0 none, k + 1 object k
    boxes: list[np.ndarray]  # per image float32 [K, 4] xyxy in input pixels


def mask_batch(scene_seed: int, indices: range, size: tuple[int, int]) -> MaskBatch:
    images, maps, boxes = [], [], []
    for index in indices:
        item = scene(scene_seed, index)
        tensor, geometry = detector_input(item.image, size)
        height, width = item.image.shape[:2]
        content = cv2.resize(item.instances.astype(np.int32),
                             (round(width * geometry.scale), round(height * geometry.scale)),
                             interpolation=cv2.INTER_NEAREST)
        full = np.zeros(size, np.int32)
        full[geometry.pad_top:geometry.pad_top + content.shape[0],
             geometry.pad_left:geometry.pad_left + content.shape[1]] = content
        images.append(tensor)
        maps.append(full)
        boxes.append(geometry.boxes_to_input(item.boxes).astype(np.float32))
    return MaskBatch(torch.from_numpy(np.stack(images)), maps, boxes)


def mask_loss(model: InstanceSegmenter, batch: MaskBatch, points: np.ndarray,
              rng: np.random.Generator) -> torch.Tensor:
    """The module docstring's loss over a batch (mean over assigned anchors)."""
    with torch.no_grad():
        features = model.features(batch.images)
    coefficients, prototypes = model.branch(features)
    _, _, proto_h, proto_w = prototypes.shape
    columns = torch.arange(proto_w, dtype=torch.float32)[None, :]
    rows = torch.arange(proto_h, dtype=torch.float32)[:, None]
    pixel = np.clip(points.astype(np.int64), 0, np.array(batch.instances[0].shape[::-1]) - 1)
    total, count = torch.zeros(()), 0
    for b, (owners_map, boxes) in enumerate(zip(batch.instances, batch.boxes, strict=True)):
        small = cv2.resize(owners_map, (proto_w, proto_h), interpolation=cv2.INTER_NEAREST)
        owners = owners_map[pixel[:, 1], pixel[:, 0]]
        for k, box in enumerate(boxes):
            anchors = np.flatnonzero(owners == k + 1)
            if not len(anchors):
                centre = (box[:2] + box[2:]) / 2
                anchors = np.array([np.argmin(((points - centre) ** 2).sum(axis=1))])
            if len(anchors) > ANCHORS_PER_OBJECT:
                anchors = rng.choice(anchors, ANCHORS_PER_OBJECT, replace=False)
            target = torch.from_numpy((small == k + 1).astype(np.float32))
            logits = (coefficients[b, :, anchors].T
                      @ prototypes[b].reshape(COEFFICIENTS, -1)).view(-1, proto_h, proto_w)
            x1, y1, x2, y2 = (box / PROTO_STRIDE).tolist()
            inside = ((columns >= x1) & (columns < x2) & (rows >= y1) & (rows < y2)).float()
            loss = F.binary_cross_entropy_with_logits(logits, target.expand_as(logits),
                                                      reduction="none")
            total = total + ((loss * inside).sum((1, 2)) / inside.sum().clamp(min=1)).sum()
            count += len(anchors)
    return total / max(count, 1)


def train_masks(model: InstanceSegmenter, plan: MaskPlan,
                log: Callable[[str], None]) -> float:
    """Train ``model``'s mask branch in place; returns the wall time in seconds."""
    torch.manual_seed(plan.seed)
    for parameter in model.detector.parameters():
        parameter.requires_grad_(False)
    model.detector.eval()
    optimizer = torch.optim.Adam(model.branch.parameters(), lr=plan.lr)
    size = shapes.DETECTOR_INPUT
    anchors, strides = make_anchors(
        [torch.zeros(1, 1, size[0] // s, size[1] // s) for s in STRIDES], STRIDES, 0.5)
    points = (anchors * strides).numpy()
    rng = np.random.default_rng(plan.seed)
    model.branch.train()
    started = time.perf_counter()
    running = []
    for step in range(plan.steps):
        batch = mask_batch(plan.scene_seed, range(step * plan.batch, (step + 1) * plan.batch),
                           size)
        for group in optimizer.param_groups:  # linear decay to a tenth
            group["lr"] = plan.lr * (1 - 0.9 * step / max(plan.steps - 1, 1))
        loss = mask_loss(model, batch, points, rng)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running.append(float(loss.detach()))
        if (step + 1) % 25 == 0 or step + 1 == plan.steps:
            log(f"step {step + 1}/{plan.steps}  mask loss {np.mean(running):.4f}  "
                f"{time.perf_counter() - started:.0f}s")
            running.clear()
    model.eval()
    return time.perf_counter() - started


@torch.no_grad()
def evaluate_masks(model: InstanceSegmenter, scene_seed: int, count: int) -> dict[str, float]:
    """Held-out scenes decoded as the app decodes them (letterbox, ``instances.decode`` at conf
    0.25): per labelled object, the IoU of the best-matching predicted mask, in frame pixels."""
    model.eval()
    best = []
    for item in held_out(scene_seed, 0, count):
        tensor, _ = detector_input(item.image, shapes.DETECTOR_INPUT)
        _, geometry = frame_letterbox(item.image, shapes.DETECTOR_INPUT)
        predictions, prototypes = model(torch.from_numpy(tensor)[None])
        result = instances.decode({"output0": predictions.numpy(), "output1": prototypes.numpy()},
                                  geometry, DetectOptions(conf=0.25))
        masks = [m.paste(item.image.shape[:2]) for m in result.masks]
        for k in range(len(item.boxes)):
            truth = item.instances == k + 1
            ious = [(m & truth).sum() / max((m | truth).sum(), 1) for m in masks]
            best.append(max(ious, default=0.0))
    best_array = np.array(best)
    return {"held_out_scenes": count, "objects": len(best),
            "mean_mask_iou": round(float(best_array.mean()), 4),
            "objects_mask_iou_over_0.5": round(float((best_array > 0.5).mean()), 4),
            "objects_mask_iou_over_0.75": round(float((best_array > 0.75).mean()), 4)}
