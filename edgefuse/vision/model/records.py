"""The model's app info with its exporter's record filled in below it, and who decided what.

Why a merge rather than a choice: edgefuse's app info may give the layout but no class names, an
Ultralytics export gives names, size and its family's thresholds; each value comes from the
first place that has it. Precedence: flags > config > edgefuse app info > the exporter's record
> what the outputs and the graph tell. The first two are applied by the apps and the task
classes; this module merges the middle two and records in ``AppInfo.decided_by`` which values
the exporter's record decided, so the start line can say so.

Readers: ``ultralytics_record`` (Ultralytics' ``metadata_props``).
"""

from __future__ import annotations

import dataclasses

import onnx

from edgefuse.model_info import AppInfo
from edgefuse.vision.model import ultralytics_record

EXPORTER = "the exporter's record"  # how the start line names a record (and who it was)
# The values a record can decide, as the start line names them.
DECIDED = {"classes": "class names", "size": "input size", "resize": "letterbox/stretch",
           "layout": "layout", "box_format": "box format", "thresholds": "NMS defaults"}


def with_exporter_record(info: AppInfo | None, model: onnx.ModelProto,
                         where: str = "") -> AppInfo | None:
    """``info`` (None: the model carries none) with what the exporter's record adds."""
    record = ultralytics_record.read(model, where)
    if record is None:
        return info
    return merge(info or AppInfo(), record.info, f"{EXPORTER} ({record.who}, "
                 f"{record.model}{': ' + record.layout_why if record.layout_why else ''})")


def merge(info: AppInfo, record: AppInfo, who: str) -> AppInfo:
    """``info``'s values, and ``record``'s where ``info`` has none; ``decided_by`` says which
    (``who`` names the record in full for the layout, shortened to its first words elsewhere)."""
    decided: list[str] = []
    task = info.task if info.task is not None else record.task
    classes = info.classes
    if not classes and record.classes:
        classes = record.classes
        decided.append("classes")
    preprocess = info.preprocess
    if preprocess is None and record.preprocess is not None:
        preprocess = record.preprocess
        decided += ["size", "resize"]
    post, theirs = info.postprocess, record.postprocess
    changes = {}
    for key in ("layout", "box_format", "conf", "iou", "max_det"):
        if getattr(post, key) is None and getattr(theirs, key) is not None:
            changes[key] = getattr(theirs, key)
    if changes.get("layout"):
        decided.append("layout")
    if changes.get("box_format"):
        decided.append("box_format")
    if {"conf", "iou", "max_det"} & set(changes):
        decided.append("thresholds")
    short = who.split(" (")[0]
    origin = short if "size" in decided else info.origin  # who decided the preprocessing
    return AppInfo(task, classes, preprocess, dataclasses.replace(post, **changes),
                   origin=origin, decided_by=(*info.decided_by,
                               *((key, who if key == "layout" else short) for key in decided)))


def describe_decided(info: AppInfo, skip: tuple[str, ...] = ()) -> str:
    """``class names, input size, letterbox/stretch from the exporter's record`` ("" when no
    record decided anything)."""
    by_who: dict[str, list[str]] = {}
    for key, who in info.decided_by:
        if key not in skip:
            by_who.setdefault(who, []).append(_label(key, info))
    return "; ".join(f"{', '.join(keys)} from {who}" for who, keys in by_who.items())


def _label(key: str, info: AppInfo) -> str:
    if info.preprocess is not None and key == "size":
        return "input size {}x{}".format(*info.preprocess.size)
    if info.preprocess is not None and key == "resize":
        return info.preprocess.resize
    return DECIDED[key]
