"""Ultralytics' own exports through ``edgefuse detect`` with nothing but --model and --source,
against Ultralytics' own predictor on the same ONNX file (``YOLO('model.onnx').predict``), photo
by photo: the same count, and each of Ultralytics' boxes found with the same class name, IoU >=
0.9 and a score within 0.01.

The models are built from Ultralytics' yaml configs at 320 x 320 with no pretrained weights and
exported by Ultralytics itself (``tests/vision/ultralytics_kit.py``, cached between runs).
"""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest

from edgefuse.cli.main import main
from edgefuse.metrics.detect import box_iou
from tests.vision import ultralytics_kit as kit

pytestmark = [pytest.mark.torch, pytest.mark.ort]
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]

# (yaml, export mode, the layout edgefuse must read, what the start line says of the boxes)
CASES = [
    ("yolov8n.yaml", "default", "yolov8", "head Detect, end2end False"),
    ("yolo11n.yaml", "default", "yolov8", "head Detect, end2end False"),
    ("yolov10n.yaml", "default", "yolov8", "head v10Detect, end2end False"),
    ("yolov10n.yaml", "end2end", "end2end", "boxes x1,y1,x2,y2 in input pixels"),
    ("yolo26n.yaml", "default", "yolov8", "end2end False"),
    ("yolo26n.yaml", "end2end", "end2end", "boxes x1,y1,x2,y2 in input pixels"),
    ("rtdetr-l.yaml", "default", "end2end", "boxes cx,cy,w,h normalised"),
]


def run_detect(onnx, tmp_path, capsys) -> tuple[dict[str, dict], str]:
    """``edgefuse detect --model M --source PHOTOS --jsonl``: the records by photo, the start
    line."""
    out = tmp_path / "out.jsonl"
    assert main(["detect", "--model", str(onnx), "--source", str(kit.photos()[0].parent),
                 "--jsonl", str(out), *QUIET]) == 0
    start = next(line for line in capsys.readouterr().err.splitlines()
                 if line.startswith(str(onnx)))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["name"]: r for r in records}, start


def frame_hw(record: dict) -> tuple[int, int]:
    """The frame's (height, width) from a record's ``size``."""
    return record["size"]["height"], record["size"]["width"]


def assert_same_detections(ours: list[dict], theirs: dict, photo: str, *,
                           clip: tuple[int, int] | None = None) -> None:
    """Same count; each of theirs matched once by class name, IoU >= 0.9, score within 0.01."""
    boxes = np.asarray(theirs["boxes"], np.float32).reshape(-1, 4)
    if clip is not None:  # Ultralytics' RT-DETR predictor does not clip; edgefuse does
        height, width = clip
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, width)
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, height)
    assert len(ours) == len(boxes), f"{photo}: {len(ours)} detections, Ultralytics {len(boxes)}"
    if not ours:
        return
    our_boxes = np.asarray([d["box"] for d in ours], np.float32)
    iou = box_iou(boxes, our_boxes)
    # An untrained YOLO26 head (reg_max 1) gives boxes with x2 <= x1 (no IoU) or a pixel or
    # two thin (where Ultralytics' per-axis rounded gain and edgefuse's letterbox ratio, under a
    # pixel apart, cost IoU): such boxes match when their corners are within a pixel.
    corners = np.abs(boxes[:, None, :] - our_boxes[None, :, :]).max(-1)
    iou = np.maximum(iou, np.where(corners <= 1.0, 1.0, 0.0))
    used: set[int] = set()
    for i, (name, score) in enumerate(zip(theirs["names"], theirs["scores"], strict=True)):
        candidates = [j for j in np.argsort(-iou[i]) if j not in used
                      and ours[j]["class"] == name and abs(ours[j]["score"] - score) <= 0.01]
        assert candidates and iou[i, candidates[0]] >= 0.9, (
            f"{photo}: Ultralytics' {name} {score:.3f} at {boxes[i].round(1).tolist()} has no "
            f"match (best IoU {iou[i].max():.3f})")
        used.add(candidates[0])


@pytest.mark.parametrize(("yaml", "mode", "layout", "boxes_said"), CASES,
                         ids=[f"{y.removesuffix('.yaml')}-{m}" for y, m, *_ in CASES])
def test_an_ultralytics_export_detects_what_ultralytics_predicts(tmp_path, capsys, yaml, mode,
                                                                 layout, boxes_said):
    export = kit.exported(yaml, mode)
    records, start = run_detect(export.onnx, tmp_path, capsys)
    assert f": {layout} on cpu" in start and boxes_said in start
    assert re.search(r"conf 0\.25, iou 0\.7, max_det 300, (class-aware|no) NMS "
                     r"\(defaults from the exporter's record\)", start), start
    assert "class names, input size 320x320" in start
    assert ("stretch" if "rtdetr" in yaml else "letterbox") in start
    assert set(records) == set(export.reference)
    detections = 0
    for photo, theirs in export.reference.items():
        record = records[photo]
        assert record["layout"] == layout
        clip = frame_hw(record) if "rtdetr" in yaml else None
        assert_same_detections(record["detections"], theirs, photo, clip=clip)
        detections += len(theirs["scores"])
    assert detections >= 20  # the seeded class branch spreads the scores over many boxes


def test_an_rtdetr_export_without_its_record_is_read_from_its_graph(tmp_path, capsys):
    """metadata_props removed: the graph says the boxes are normalised (a Sigmoid makes them)
    and the DETR family's resize is a stretch; the detections are Ultralytics' still (by class
    id: without the record there are no names)."""
    export = kit.exported("rtdetr-l.yaml")
    bare = onnx.load(export.onnx)
    del bare.metadata_props[:]
    path = tmp_path / "rtdetr.onnx"
    onnx.save(bare, path)
    records, start = run_detect(path, tmp_path, capsys)
    assert "told from the graph" in start and "the boxes leave a Sigmoid" in start
    assert "input stretched to 320x320 (the DETR family's resize" in start
    for photo, theirs in export.reference.items():
        numbered = {**theirs, "names": [f"class{c}" for c in theirs["classes"]]}
        assert_same_detections(records[photo]["detections"], numbered, photo,
                               clip=frame_hw(records[photo]))
