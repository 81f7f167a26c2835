"""PaddleDetection's ``infer_cfg.yml``, the record its exporter writes beside the model.

Why it is read: ``tools/export_model.py`` writes the model's preprocessing, class names and NMS
into ``infer_cfg.yml`` (``ppdet/engine/export_utils.py``, ``_dump_infer_config``), and its own
predictor ``deploy/python/infer.py`` runs from that file alone. edgefuse follows the same
operators as ``deploy/python/preprocess.py`` does, on the frame decoded to RGB
(``decode_image``: ``cv2.cvtColor(im, cv2.COLOR_BGR2RGB)``):

- ``Resize`` with ``keep_ratio: false``: ``cv2.resize`` to ``target_size`` with the OpenCV flag
  ``interp`` (the configs' ``interp: 2`` is ``INTER_CUBIC``; the operator's default is linear);
  ``keep_ratio: true`` makes a size the model's fixed input does not take: refused;
- ``NormalizeImage``: ``/255`` when ``is_scale`` (default true), then ``(x - mean) / std``
  unless ``norm_type: none``;
- ``Permute``: HWC -> CHW; ``PadStride``: no-op when the size is a multiple of its stride.

Any other operator is refused by name rather than skipped. ``label_list`` gives the class
names, ``draw_threshold`` the score threshold ``infer.py`` draws with, and an ``NMS`` section
(PicoDet exported without post-processing) the NMS's ``nms_threshold`` and ``keep_top_k``.

Where a model carries no ``infer_cfg.yml`` but its inputs (``image``, ``scale_factor``,
``im_shape``) or its outputs say PaddleDetection, ``families`` takes the configs' defaults:
stretch, cubic, RGB; the normalisation then differs by model (PicoDet and PP-YOLOE v1 use the
ImageNet statistics, PP-YOLOE+ ``/255`` only) and is said to be a guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgefuse import _records as rec
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import AppInfo, Postprocess
from edgefuse.preprocess import IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS, Preprocess

INFER_CFG = "infer_cfg.yml"
_REF = Ref.BAD_APP_INFO
_INTERP_NAMES = {code: name for name, code in INTERPOLATIONS.items()}
# The configs' Resize (interp: 2) and the decoded RGB frame: what every family member shares.
PADDLE_FIT = {"resize": "stretch", "interpolation": "cubic", "color": "RGB",
              "scale": 1.0 / 255.0, "layout": "NCHW", "dtype": "float32"}
PICODET_NORM = {"mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)}
PPYOLOE_PLUS_NORM = {"mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}


def infer_cfg_beside(model: Path | None) -> Path | None:
    """``infer_cfg.yml`` in the model file's folder (or in a BUILD_DIR), None when absent."""
    if model is None:
        return None
    folder = model if model.is_dir() else model.parent
    path = folder / INFER_CFG
    return path if path.is_file() else None


def read_infer_cfg(path: str | os.PathLike[str]) -> AppInfo:
    """The app info ``infer_cfg.yml`` says (InputError naming what it cannot follow)."""
    where = str(path)
    data = rec.read_yaml(path, "PaddleDetection infer_cfg.yml", _REF) or {}
    rec.check_mapping(data, where, _REF)
    steps = data.get("Preprocess")
    if not isinstance(steps, list) or not steps:
        raise rec.bad("infer_cfg.yml has no 'Preprocess' list", where, _REF)
    record = {"color": "RGB", "layout": "HWC"}
    for step in steps:
        _apply(step, record, where)
    if record.pop("layout") != "NCHW":
        raise rec.bad("infer_cfg.yml's Preprocess has no Permute (an HWC input)", where, _REF,
                      hint="edgefuse feeds PaddleDetection models NCHW, as its exports take")
    nms = data.get("NMS") or {}
    rec.check_mapping(nms, f"{where} NMS", _REF)
    post = {"conf": data.get("draw_threshold"), "iou": nms.get("nms_threshold"),
            "max_det": nms.get("keep_top_k")}
    labels = data.get("label_list") or []
    return AppInfo(
        task="detect", classes=rec.strings(labels, "label_list", where, _REF),
        preprocess=Preprocess.from_dict({**record, "layout": "NCHW"}, where=where),
        postprocess=Postprocess.from_dict({k: v for k, v in post.items() if v is not None},
                                          where=where),
        origin=f"{INFER_CFG} beside the model (PaddleDetection, arch "
               f"{data.get('arch', 'not named')})")


def _apply(step: Any, record: dict[str, Any], where: str) -> None:
    rec.check_mapping(step, f"{where} Preprocess", _REF)
    kind = step.get("type")
    if kind == "Resize":
        _resize(step, record, where)
    elif kind == "NormalizeImage":
        scale = 1.0 / 255.0 if step.get("is_scale", True) else 1.0
        record["scale"] = scale
        if step.get("norm_type", "mean_std") == "mean_std":
            record["mean"] = rec.numbers(step.get("mean", IMAGENET_MEAN), "mean", 3, where, _REF)
            record["std"] = rec.numbers(step.get("std", IMAGENET_STD), "std", 3, where, _REF)
    elif kind == "Permute":
        record["layout"] = "NCHW"
    elif kind == "PadStride":
        stride = int(step.get("stride", 0))
        if stride > 0 and any(s % stride for s in record.get("size", (1, 1))):
            raise rec.bad(f"PadStride {stride} pads the {record.get('size')} input: a size "
                          "edgefuse's fixed-input models do not take", where, _REF)
    else:
        raise InputError(
            f"{where}: PaddleDetection's preprocess step '{kind}' is not one edgefuse follows "
            "(Resize, NormalizeImage, Permute, PadStride)",
            hint="set the preprocess record in the config (preprocess: size, resize, "
                 "interpolation, color, scale, mean, std); docs/detection-layouts.md",
            reference=_REF)


def _resize(step: Mapping[str, Any], record: dict[str, Any], where: str) -> None:
    size = rec.numbers(step.get("target_size"), "target_size", 2, where, _REF, integer=True,
                       low=1)
    if step.get("keep_ratio", True):
        raise rec.bad("Resize keep_ratio: true makes an input size that depends on the image; "
                      "edgefuse feeds a fixed-size input", where, _REF,
                      hint="export with keep_ratio: false, or set preprocess in the config")
    interp = step.get("interp", 1)
    if interp not in _INTERP_NAMES:
        raise rec.bad(f"Resize interp {interp!r} is not an OpenCV flag 0-4", where, _REF)
    record.update(size=list(size), resize="stretch", interpolation=_INTERP_NAMES[interp])
