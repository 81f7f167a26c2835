"""Ultralytics' predictor with ``retina_masks=True`` on an exported segmenter: the reference for
edgefuse's ``retina_masks`` (run by ``ultralytics_kit.retina_reference`` in a subprocess, as
``ultralytics_reference.py`` is).

    python ultralytics_retina.py MODEL.onnx OUT_DIR IMAGE...

writes OUT_DIR/reference.json (per image: boxes, scores, classes, names, ``masks.xy``
polygons) and OUT_DIR/masks_<i>.npz (the frame-size masks Ultralytics made).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from ultralytics import YOLO


def main(model: str, out: Path, images: list[str]) -> None:
    predictor = YOLO(model, task="segment")
    record = {}
    for index, image in enumerate(images):
        result = predictor.predict(image, imgsz=320, verbose=False, save=False,
                                   retina_masks=True)[0]
        boxes = result.boxes
        frame = result.masks.data.numpy() > 0.5
        np.savez_compressed(out / f"masks_{index}.npz", masks=np.packbits(frame, -1),
                            width=np.int64(frame.shape[-1]))
        record[Path(image).name] = {
            "boxes": boxes.xyxy.numpy().tolist(), "scores": boxes.conf.numpy().tolist(),
            "classes": boxes.cls.numpy().astype(int).tolist(),
            "names": [result.names[int(c)] for c in boxes.cls],
            "polygons": [p.tolist() for p in result.masks.xy]}
    (out / "reference.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
