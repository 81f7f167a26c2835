"""Export an Ultralytics model from its yaml and record what Ultralytics' own predictor finds.

Run in a subprocess by ``ultralytics_kit`` (never imported by the suite), with the tests-only
torchvision stand-in (tests/fakes/torchvision_for_ultralytics) on its PYTHONPATH and Ultralytics'
settings in a private folder, offline (``YOLO_OFFLINE``): nothing is downloaded, the models are
built from their yaml configs with no pretrained weights.

Why the model is changed before export: a freshly built model's activations fade layer by layer
(to about 1e-7 at the head) and it scores every class near its prior (about 0.01), so nothing
passes ``conf``. Two seeded, deterministic changes make its outputs spread: the BatchNorm
statistics are measured on the photos themselves (one pass, cumulative averages), and the last
layer of every class branch gets seeded weights; each photo then gets tens of detections of
varied classes and boxes through every part of the decoder.

    python ultralytics_reference.py OUT_DIR YAML SEED EXPORT_MODE IMAGE...

writes OUT_DIR/model.onnx and OUT_DIR/reference.json (per image: boxes xyxy in frame pixels,
scores, classes; a segmenter also ``masks_<i>.npz``: frame-size masks as Ultralytics scales
them, and ``masks.xy`` polygons).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import torch
from ultralytics import RTDETR, YOLO
from ultralytics.utils import YAML, ops
from ultralytics.utils.checks import check_yaml


def spread_class_scores(model: torch.nn.Module, seed: int) -> None:
    """Seeded weights on the last layer of every class branch (see the module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    head = model.model[-1]
    last_layers = []
    for name in ("cv3", "one2one_cv3"):
        for branch in getattr(head, name, None) or []:
            last_layers.append(branch[-1] if isinstance(branch, torch.nn.Sequential) else branch)
    last_layers.extend(getattr(head, "dec_score_head", None) or [])
    if hasattr(head, "enc_score_head"):
        last_layers.append(head.enc_score_head)
    with torch.no_grad():
        for layer in last_layers:
            weight = layer.weight
            fan_in = weight[0].numel()
            weight.copy_(torch.randn(weight.shape, generator=generator) * (0.5 / fan_in) ** 0.5)
            prior = -3.0 if isinstance(layer, torch.nn.Linear) else -4.0  # DETR's are Linear
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=generator) * 0.5 + prior)


def measure_batch_norms(model: torch.nn.Module, images: list[str]) -> None:
    """BatchNorm statistics of the photos (resized to 320 x 320): activations keep their scale."""
    batch = np.stack([cv2.resize(cv2.imread(p), (320, 320))[:, :, ::-1] for p in images])
    tensor = torch.from_numpy(np.ascontiguousarray(batch)).permute(0, 3, 1, 2).float() / 255
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the one pass
        norm.train()
    with torch.no_grad():
        model(tensor)
    for norm in norms:
        norm.eval()


def main(out: Path, yaml: str, seed: int, mode: str, images: list[str]) -> None:
    torch.manual_seed(seed)
    maker = RTDETR if "rtdetr" in yaml else YOLO
    model = maker(yaml)
    model.model.names = dict(YAML.load(check_yaml("coco8.yaml"))["names"])
    model.model.eval()
    measure_batch_norms(model.model, images)
    spread_class_scores(model.model, seed)
    options = {"nms": False} if mode == "end2end" else {}
    exported = Path(model.export(format="onnx", imgsz=320, **options))
    shutil.move(exported, out / "model.onnx")
    predictor = YOLO(str(out / "model.onnx"), task=model.task)
    record = {}
    for index, image in enumerate(images):
        result = predictor.predict(image, imgsz=320, verbose=False, save=False)[0]
        boxes = result.boxes
        entry = {"boxes": boxes.xyxy.numpy().tolist(), "scores": boxes.conf.numpy().tolist(),
                 "classes": boxes.cls.numpy().astype(int).tolist(),
                 "names": [result.names[int(c)] for c in boxes.cls]}
        if result.masks is not None:
            frame = ops.scale_masks(result.masks.data[None], result.orig_shape)[0] > 0.5
            np.savez_compressed(out / f"masks_{index}.npz", masks=np.packbits(frame.numpy(), -1),
                                width=np.int64(frame.shape[-1]))
            entry["polygons"] = [p.tolist() for p in result.masks.xy]
        record[Path(image).name] = entry
    (out / "reference.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:])
