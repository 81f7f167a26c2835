"""An Ultralytics YOLOv8-seg export through ``edgefuse segment`` (only --model and --source) and
``Segmenter.open`` (no options), against Ultralytics 8.4's own predictor on the same ONNX file,
photo by photo: the same instances (class name, box IoU >= 0.9, score within 0.01), each mask at
IoU >= 0.8 with Ultralytics' (its ``process_mask``: upsample, then crop; empty masks dropped)
and each polygon (``masks.xy``, every contour joined) filling the same pixels (IoU >= 0.8).
"""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from edgefuse.cli.main import main
from edgefuse.metrics.detect import box_iou
from edgefuse.vision.segment.segmenter import Segmenter
from tests.vision import ultralytics_kit as kit

pytestmark = [pytest.mark.torch, pytest.mark.ort]
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.count_nonzero(a | b)
    return np.count_nonzero(a & b) / union if union else 1.0


def filled(polygon, size: tuple[int, int]) -> np.ndarray:
    canvas = np.zeros(size, np.uint8)
    points = np.round(np.asarray(polygon, np.float32)).astype(np.int32).reshape(-1, 1, 2)
    if len(points):
        cv2.fillPoly(canvas, [points], 1)
    return canvas.astype(bool)


def assert_same_outline(ours: np.ndarray, theirs: list, size: tuple[int, int], what: str
                        ) -> None:
    """The same contour points, most within a pixel (Ultralytics' ``scale_coords`` scales each
    axis by its own rounded gain, edgefuse by the letterbox ratio), none more than one input
    pixel (in frame pixels) apart; where a mask differs by a few pixels the outline has other
    points, and then the filled polygons agree at IoU >= 0.8. (Where the outline joins several
    contours, a one-pixel change can move a joining point far: 98% of the points must agree.)"""
    theirs = np.asarray(theirs, np.float32).reshape(-1, 2)
    if len(ours) == len(theirs) and len(ours):
        distance = np.abs(ours - theirs).max(axis=1)
        one_input_pixel = max(size) / 320 + 0.5
        close = np.mean(distance <= one_input_pixel)
        assert np.median(distance) <= 1 and close >= 0.98, (
            f"{what}: {1 - close:.1%} of the polygon points more than an input pixel apart")
        return
    overlap = iou(filled(ours, size), filled(theirs, size))
    assert overlap >= 0.8, f"{what}: {len(ours)} polygon points, Ultralytics {len(theirs)}, " \
                           f"filled IoU {overlap:.3f}"


@pytest.fixture(scope="module")
def export():
    return kit.exported("yolov8n-seg.yaml")


def test_the_app_says_why_the_layout_and_records_it_in_every_frame(export, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["segment", "--model", str(export.onnx), "--source",
                 str(kit.photos()[0].parent), "--jsonl", str(out), *QUIET]) == 0
    start = next(line for line in capsys.readouterr().err.splitlines()
                 if line.startswith(str(export.onnx)))
    assert "layout yolov8_seg (80 classes), set by the exporter's record" in start
    assert "conf 0.25, iou 0.7, max_det 300, class-aware NMS" in start
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(kit.PHOTOS)
    assert all(r["layout"] == "yolov8_seg" for r in records)
    counts = {r["name"]: len(r["instances"]) for r in records}
    assert counts == {name: len(ref["scores"]) for name, ref in export.reference.items()}
    assert {i["class"] for r in records for i in r["instances"]} <= {
        n for ref in export.reference.values() for n in ref["names"]}


def test_instances_masks_and_polygons_match_ultralytics(export):
    low_masks, instances = [], 0
    with Segmenter.open(export.onnx, backends="cpu") as segmenter:
        for index, (photo, path) in enumerate(zip(kit.PHOTOS, kit.photos(), strict=True)):
            theirs = export.reference[photo]
            image = cv2.imread(str(path))
            ours = segmenter(image)
            boxes = np.asarray(theirs["boxes"], np.float32).reshape(-1, 4)
            assert len(ours) == len(boxes), f"{photo}: {len(ours)} instances, Ultralytics " \
                                            f"{len(boxes)}"
            masks = export.masks(index)
            size = image.shape[:2]
            overlaps = box_iou(boxes, ours.detections.boxes) if len(boxes) else None
            used: set[int] = set()
            for i, (name, score) in enumerate(zip(theirs["names"], theirs["scores"],
                                                  strict=True)):
                found = [j for j in np.argsort(-overlaps[i]) if j not in used
                         and segmenter.class_names[ours.detections.classes[j]] == name
                         and abs(ours.detections.scores[j] - score) <= 0.01]
                assert found and overlaps[i, found[0]] >= 0.9, f"{photo}: {name} {score:.3f}"
                j = found[0]
                used.add(j)
                mask_iou = iou(ours.masks[j].paste(size), masks[i])
                if mask_iou < 0.8:
                    low_masks.append((photo, name, round(mask_iou, 3)))
                assert_same_outline(ours.polygons[j], theirs["polygons"][i], size,
                                    f"{photo}: {name}")
                instances += 1
    assert not low_masks, f"masks below IoU 0.8: {low_masks}"
    assert instances >= 50
