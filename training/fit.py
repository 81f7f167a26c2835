"""Training loops and held-out evaluation of the two shapes models.

Why these choices: both models start from PyTorch's default initialisation under
``torch.manual_seed(seed)`` and train with AdamW (no decay on BatchNorm and biases), a linear
warm-up then a cosine decay to 1% of the peak rate, and an exponential moving average of the
weights (ultralytics' ModelEMA), which is what gets evaluated and shipped. Every batch is a
function of its step (``training.data``), so a run is reproducible from (seed, scene seed, steps,
batch) on the same torch version and thread count.

Evaluation runs the inference graph exactly as an app would: the detector's decoded [B, 4 + C, N]
output through ``edgefuse.metrics.detect.decode_yolo`` and boxes mapped back through the letterbox
to the scene's pixels, scored by ``average_precision``; the segmenter's logits resized to the
scene's size, argmax, scored by ``edgefuse.metrics.segment.mean_iou``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable

import cv2
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgefuse.metrics.detect import Detections, average_precision, decode_yolo
from edgefuse.metrics.segment import mean_iou
from edgefuse.models import shapes
from edgefuse.models.deeplabv3plus import deeplabv3plus_shapes
from edgefuse.models.yolov8 import STRIDES, yolov8_shapes
from training.data import (
    batches,
    detect_batch,
    detector_input,
    held_out,
    segment_batch,
    segmenter_input,
)
from training.yolo_loss import detection_loss


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one model is trained."""

    steps: int
    batch: int
    lr: float
    weight_decay: float
    seed: int
    scene_seed: int
    workers: int
    warmup: int = 300
    log_every: int = 100


class ModelEMA:
    """ultralytics' ModelEMA: decay ramps up as 1 - exp(-updates / tau); buffers copied."""

    def __init__(self, model: nn.Module, tau: float, decay: float = 0.9999) -> None:
        self.ema = copy.deepcopy(model).eval().requires_grad_(False)
        self.tau, self.decay, self.updates = tau, decay, 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        current = model.state_dict()
        for key, value in self.ema.state_dict().items():
            if value.dtype.is_floating_point:
                value.mul_(d).add_(current[key].detach(), alpha=1 - d)
            else:
                value.copy_(current[key])


def _optimizer(model: nn.Module, plan: Plan) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (decay if parameter.ndim > 1 and "bn" not in name else no_decay).append(parameter)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": plan.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=plan.lr, betas=(0.9, 0.999),
    )


def _rate(step: int, plan: Plan) -> float:
    if step < plan.warmup:
        return plan.lr * (step + 1) / plan.warmup
    progress = (step - plan.warmup) / max(1, plan.steps - plan.warmup)
    return plan.lr * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * progress)))


def _train(
    model: nn.Module,
    plan: Plan,
    make_batch: Callable,
    size: tuple[int, int],
    loss_of: Callable[[nn.Module, object], tuple[torch.Tensor, tuple[float, ...]]],
    log: Callable[[str], None],
) -> tuple[nn.Module, float]:
    optimizer = _optimizer(model, plan)
    ema = ModelEMA(model, tau=max(100.0, plan.steps / 5))
    model.train()
    started = time.perf_counter()
    running: list[tuple[float, ...]] = []
    stream = batches(make_batch, plan.scene_seed, size, plan.batch, plan.steps, plan.workers)
    for step, batch in enumerate(stream):
        for group in optimizer.param_groups:
            group["lr"] = _rate(step, plan)
        loss, parts = loss_of(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        ema.update(model)
        running.append((float(loss.detach()), *parts))
        if (step + 1) % plan.log_every == 0 or step + 1 == plan.steps:
            means = np.mean(running, axis=0)
            elapsed = time.perf_counter() - started
            log(f"step {step + 1}/{plan.steps}  loss {' '.join(f'{m:.4f}' for m in means)}  "
                f"lr {_rate(step, plan):.2e}  {elapsed:.0f}s")
            running.clear()
    return ema.ema, time.perf_counter() - started


# --- detector -----------------------------------------------------------------------------------


def new_detector(seed: int) -> nn.Module:
    """The detector at PyTorch's default init under ``seed``, with ultralytics' head biases."""
    torch.manual_seed(seed)
    model = yolov8_shapes()
    detect = model.model[-1]
    size = shapes.DETECTOR_INPUT[0]
    with torch.no_grad():
        for box, cls, stride in zip(detect.cv2, detect.cv3, STRIDES, strict=True):
            box[-1].bias.fill_(1.0)
            cls[-1].bias.fill_(math.log(5 / detect.nc / (size / stride) ** 2))
    return model


def train_detector(plan: Plan, log: Callable[[str], None]) -> tuple[nn.Module, float]:
    def loss_of(model, batch):
        images = torch.from_numpy(batch.images)
        return detection_loss(model, images, batch.boxes, batch.classes)

    model = new_detector(plan.seed)
    return _train(model, plan, detect_batch, shapes.DETECTOR_INPUT, loss_of, log)


@torch.no_grad()
def evaluate_detector(
    model: nn.Module, scene_seed: int, count: int, *, conf: float = 0.001, iou: float = 0.6,
    batch: int = 16,
) -> dict[str, float]:
    """AP50 and AP50:95 on held-out scenes, boxes in the scenes' own pixels."""
    model.eval()
    predictions, truths = [], []
    for start in range(0, count, batch):
        items = held_out(scene_seed, start, min(count, start + batch))
        inputs, geometries = zip(
            *(detector_input(item.image, shapes.DETECTOR_INPUT) for item in items), strict=True
        )
        output = model(torch.from_numpy(np.stack(inputs))).numpy()
        decoded = decode_yolo(output, conf_threshold=conf, iou_threshold=iou)
        for found, geometry, item in zip(decoded, geometries, items, strict=True):
            height, width = item.image.shape[:2]
            boxes = geometry.boxes_to_image(found.boxes)
            boxes = np.clip(boxes, 0, [width, height, width, height])
            predictions.append(Detections(boxes, found.scores, found.classes))
            truths.append(Detections(item.boxes, np.ones(len(item.boxes)), item.classes))
    result = average_precision(predictions, truths)
    return {"held_out_scenes": count, "conf": conf, "nms_iou": iou, **result}


# --- segmenter ----------------------------------------------------------------------------------


def new_segmenter(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return deeplabv3plus_shapes()


def train_segmenter(plan: Plan, log: Callable[[str], None]) -> tuple[nn.Module, float]:
    def loss_of(model, batch):
        logits = model(torch.from_numpy(batch.images))
        loss = F.cross_entropy(logits, torch.from_numpy(batch.masks))
        return loss, ()

    model = new_segmenter(plan.seed)
    return _train(model, plan, segment_batch, shapes.SEGMENTER_INPUT, loss_of, log)


@torch.no_grad()
def evaluate_segmenter(
    model: nn.Module, scene_seed: int, count: int, *, batch: int = 8
) -> dict[str, float]:
    """mIoU over held-out scenes, label maps at the scenes' own sizes."""
    model.eval()
    references, candidates = [], []
    for start in range(0, count, batch):
        items = held_out(scene_seed, start, min(count, start + batch))
        inputs = np.stack([segmenter_input(item.image, shapes.SEGMENTER_INPUT) for item in items])
        logits = model(torch.from_numpy(inputs)).numpy()
        for item, scores in zip(items, logits, strict=True):
            height, width = item.mask.shape
            resized = cv2.resize(scores.transpose(1, 2, 0), (width, height),
                                 interpolation=cv2.INTER_LINEAR)
            references.append(item.mask.ravel())
            candidates.append(resized.argmax(-1).ravel())
    result = mean_iou(np.concatenate(references), np.concatenate(candidates),
                      1 + shapes.NUM_CLASSES)
    return {"held_out_scenes": count, **result}
