"""Task-level parity: do the candidate's decisions (classes, boxes, masks) match the reference's?

Why on top of cosine: a cosine of 0.9995 on a YOLO head says nothing about whether a box moved
past an IoU threshold or a score crossed the confidence threshold. The reference model's decisions
serve as ground truth and the candidate is scored against them:
- classify: top-1 agreement and "reference top-1 in candidate top-5";
- detect: the reference's boxes (score > ``gt_conf`` after class-aware NMS) are the ground truth,
  the candidate's boxes (score > 0.001, COCO's evaluation threshold) are scored with COCO-style
  AP50 and AP50:95;
- segment: mean IoU (and pixel agreement) of the per-pixel argmax maps.
The gate is one number per task (top-1 agreement, AP50, mean IoU) against ``min_score``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.metrics.classify import topk_agreement
from edgefuse.metrics.detect import average_precision, decode_yolo
from edgefuse.metrics.segment import mean_iou

TASKS = ("classify", "detect", "segment")
DEFAULT_MIN_SCORE = 0.98
DEFAULT_GT_CONF = 0.25
EVAL_CONF = 0.001
_GATED = {"classify": "top1", "detect": "AP50", "segment": "mean_iou"}


@dataclasses.dataclass
class TaskParity:
    task: str
    output: str
    metrics: dict[str, float | int | None]
    min_score: float

    @property
    def score(self) -> float | None:
        value = self.metrics.get(_GATED[self.task])
        return None if value is None else float(value)

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score >= self.min_score

    def to_json(self) -> dict:
        return {
            "task": self.task,
            "output": self.output,
            "gated_metric": _GATED[self.task],
            "min_score": self.min_score,
            "passed": self.passed,
            "metrics": self.metrics,
        }

    def render(self) -> str:
        shown = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in self.metrics.items()
        )
        gate = _GATED[self.task]
        verdict = "ok" if self.passed else "FAIL"
        if self.score is None:
            verdict = "FAIL (no reference decisions to score against)"
        return (f"task {self.task} on '{self.output}': {shown}  "
                f"[{gate} >= {self.min_score}: {verdict}]")


def task_parity(
    task: str,
    reference: Sequence[Mapping[str, np.ndarray]],
    candidate: Sequence[Mapping[str, np.ndarray]],
    *,
    output: str | None = None,
    min_score: float = DEFAULT_MIN_SCORE,
    gt_conf: float = DEFAULT_GT_CONF,
) -> TaskParity:
    """Score ``candidate`` outputs against ``reference`` outputs, one mapping per sample."""
    if task not in TASKS:
        raise InputError(f"unknown task '{task}'", hint=f"use one of: {', '.join(TASKS)}",
                         reference=Ref.UNKNOWN_TASK)
    name = output or next(iter(reference[0]))
    if name not in reference[0] or name not in candidate[0]:
        raise InputError(
            f"output '{name}' is not produced by both models",
            hint=f"the reference's outputs are {sorted(reference[0])}",
            reference=Ref.OUTPUTS_MISMATCH,
        )
    ref = [np.asarray(r[name], dtype=np.float64) for r in reference]
    cand = [np.asarray(c[name], dtype=np.float64) for c in candidate]
    if task == "classify":
        metrics = topk_agreement(_stack_rows(ref), _stack_rows(cand))
    elif task == "segment":
        metrics = _segment(ref, cand)
    else:
        metrics = _detect(ref, cand, gt_conf)
    return TaskParity(task, name, metrics, min_score)


def _stack_rows(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([a.reshape(a.shape[0], -1) for a in arrays], axis=0)


def _segment(ref: list[np.ndarray], cand: list[np.ndarray]) -> dict:
    if ref[0].ndim != 4:
        raise InputError(
            f"segmentation parity needs [N, classes, H, W] logits, got shape {ref[0].shape}",
            reference=Ref.BAD_TASK_OUTPUT,
        )
    classes = ref[0].shape[1]
    ref_maps = np.concatenate([np.argmax(r, axis=1).reshape(-1) for r in ref])
    cand_maps = np.concatenate([np.argmax(c, axis=1).reshape(-1) for c in cand])
    return mean_iou(ref_maps, cand_maps, classes)


def _detect(ref: list[np.ndarray], cand: list[np.ndarray], gt_conf: float) -> dict:
    if ref[0].ndim != 3:
        raise InputError(
            f"detection parity needs a [N, boxes, 5 + classes] or [N, 4 + classes, boxes] "
            f"YOLO output, got shape {ref[0].shape}",
            reference=Ref.BAD_TASK_OUTPUT,
        )
    truth = [d for r in ref for d in decode_yolo(r, conf_threshold=gt_conf, max_detections=100)]
    found = [d for c in cand for d in decode_yolo(c, conf_threshold=EVAL_CONF,
                                                    max_detections=100)]
    metrics = average_precision(found, truth)
    metrics["gt_conf"] = gt_conf
    return metrics
