"""PaddleDetection's own pipeline on one photo: what edgefuse is compared with.

Preprocessing by ppdet's operators (``ppdet/data/transform/operators.py``: ``Decode`` reads
the file and converts to RGB, then the ``Preprocess`` steps of the export's ``infer_cfg.yml``,
built by name); the ONNX model on ONNX Runtime fed ``image``, ``scale_factor`` and ``im_shape``
from the sample as ``deploy/python/infer.py`` does; then:

- boxes + scores: ppdet's ``MultiClassNMS`` (``ppdet/modeling/layers.py``), after dividing the
  boxes by the scale factor where the graph has not (PicoDet's ``post_process`` does it before
  its NMS);
- PicoDet's raw heads: ``deploy/python/picodet_postprocess.py`` (``PicoDetPostProcess``, copied
  beside this file), as ``infer.py`` calls it.

Rows come back as (x1, y1, x2, y2, score, class) in frame pixels. Needs paddle, paddledet and
scipy (``make_paddle.py``'s environment). Run as a script it writes ``paddle/reference.json``,
the detections of every fixture on every photo, which the tests compare with where paddle is
not installed::

    PYTHONPATH=. python tests/vision/detect/exporters/paddle_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import yaml

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "paddle" / "reference.json"
# Thresholds the references are made with: the score where the random heads give a few to a
# few hundred boxes, the NMS IoU of each model's config (PP-YOLOE+ 0.7, PicoDet 0.6).
# ppdet's MultiClassNMS keeps the best 300 (keep_top_k, of all classes), PicoDetPostProcess
# 100 per class: no class here reaches 100, and the tests set max_det 300.
THRESHOLDS = {"ppyoloe_plus": (0.95, 0.7), "picodet_boxes": (0.7, 0.6),
              "picodet_raw": (0.7, 0.6)}


def preprocess(model_dir: Path, photo: Path) -> dict:
    """ppdet's Decode and the infer_cfg.yml steps on ``photo``: the sample dict."""
    from ppdet.data.transform import operators  # noqa: PLC0415 - the generator's venv only

    config = yaml.safe_load((model_dir / "infer_cfg.yml").read_text())
    steps = [operators.Decode()]
    for step in config["Preprocess"]:
        step = dict(step)
        steps.append(getattr(operators, step.pop("type"))(**step))
    sample = {"im_file": str(photo)}
    for step in steps:
        sample = step(sample)
    return sample


def predict(model_dir: Path, photo: Path, conf: float, iou: float) -> np.ndarray:
    """PaddleDetection's detections for ``photo`` (rows x1, y1, x2, y2, score, class)."""
    config = yaml.safe_load((model_dir / "infer_cfg.yml").read_text())
    sample = preprocess(model_dir, photo)
    session = ort.InferenceSession(str(model_dir / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    available = {"image": sample["image"][None].astype(np.float32),
                 "scale_factor": sample["scale_factor"][None].astype(np.float32),
                 "im_shape": sample["im_shape"][None].astype(np.float32)}
    names = [i.name for i in session.get_inputs()]
    outputs = session.run(None, {name: available[name] for name in names})
    if len(outputs) > 2:
        rows = _picodet(outputs, config, available, conf, iou)
    else:
        rows = _multiclass_nms(outputs, available, "scale_factor" not in names, conf, iou)
    return np.concatenate([rows[:, 2:6], rows[:, 1:2], rows[:, 0:1]], 1) if len(rows) \
        else np.zeros((0, 6))


def _multiclass_nms(outputs, available, divide: bool, conf: float, iou: float) -> np.ndarray:
    import paddle  # noqa: PLC0415 - the generator's venv only
    from ppdet.modeling.layers import MultiClassNMS  # noqa: PLC0415

    boxes, scores = (outputs if outputs[0].shape[-1] == 4 else outputs[::-1])
    if divide:  # PicoHeadV2.post_process: pred_bboxes /= [sx, sy, sx, sy], then the NMS
        scale_y, scale_x = available["scale_factor"][0]
        boxes = boxes / np.array([scale_x, scale_y, scale_x, scale_y], np.float32)
    nms = MultiClassNMS(score_threshold=conf, nms_threshold=iou, nms_top_k=1000,
                        keep_top_k=300)
    found, count, _ = nms(paddle.to_tensor(boxes), paddle.to_tensor(scores))
    rows = found.numpy()[:int(count.numpy()[0])]
    return rows[rows[:, 0] >= 0]  # an empty result is one row of -1s


def _picodet(outputs, config, available, conf: float, iou: float) -> np.ndarray:
    from tests.vision.detect.exporters.picodet_postprocess import (  # noqa: PLC0415
        PicoDetPostProcess,
    )

    levels = len(outputs) // 2
    post = PicoDetPostProcess(available["image"].shape[2:], available["im_shape"],
                              available["scale_factor"], strides=config["fpn_stride"],
                              score_threshold=conf, nms_threshold=iou)
    rows, _ = post(outputs[:levels], outputs[levels:])
    return rows


def main() -> None:
    from tests.vision.detect.exporters.compare import PHOTOS  # noqa: PLC0415

    reference = {}
    for name, (conf, iou) in THRESHOLDS.items():
        photos = {p.name: predict(HERE / "paddle" / name, p, conf, iou).round(4).tolist()
                  for p in PHOTOS}
        reference[name] = {"conf": conf, "iou": iou, "photos": photos}
        print(name, {k: len(v) for k, v in photos.items()})
    REFERENCE.write_text(json.dumps(reference, indent=None) + "\n")


if __name__ == "__main__":
    main()
