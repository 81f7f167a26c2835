"""An Ultralytics YOLOv8-seg export through ``edgefuse segment`` (only --model and --source) and
``Segmenter.open`` (no options), against Ultralytics 8.4's own predictor on the same ONNX file,
photo by photo: the same instances (class name, box IoU >= 0.9, score within 0.01), each mask at
IoU >= 0.8 with Ultralytics' (its ``process_mask``: upsample, then crop; empty masks dropped)
and each polygon (``masks.xy``, every contour joined) on the same points; with
``retina_masks`` (masks at frame resolution, ``process_mask_native``) every mask at IoU >= 0.99.
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


def assert_same_outline(ours: np.ndarray, theirs: list, size: tuple[int, int], what: str,
                        tolerance: float) -> None:
    """Each polygon's points lie on the other's, 98% of them within ``tolerance`` px (both
    ways). Not point by point: ``masks.xy`` joins a mask's contours through their closest
    points, so one pixel of difference between two masks can move a joining point, and with it
    the order, but not the places, of the points."""
    theirs = np.asarray(theirs, np.float32).reshape(-1, 2)
    assert len(ours) and len(theirs), f"{what}: {len(ours)} points, Ultralytics {len(theirs)}"
    for a, b, direction in ((ours, theirs, "ours from theirs"), (theirs, ours, "theirs from ours")):
        near = np.mean(distance_to(b, size)(a) <= tolerance)
        assert near >= 0.98, f"{what}: {1 - near:.1%} of the points ({direction}) more than " \
                             f"{tolerance:.1f} px away"


def distance_to(points: np.ndarray, size: tuple[int, int]):
    """A lookup of the distance from a pixel to the nearest of ``points`` (a distance map)."""
    canvas = np.full(size, 255, np.uint8)
    pixels = np.round(points).astype(np.int64)
    pixels[:, 0] = pixels[:, 0].clip(0, size[1] - 1)
    pixels[:, 1] = pixels[:, 1].clip(0, size[0] - 1)
    canvas[pixels[:, 1], pixels[:, 0]] = 0
    field = cv2.distanceTransform(canvas, cv2.DIST_L2, 5)

    def lookup(where: np.ndarray) -> np.ndarray:
        at = np.round(where).astype(np.int64)
        return field[at[:, 1].clip(0, size[0] - 1), at[:, 0].clip(0, size[1] - 1)]
    return lookup


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


@pytest.mark.parametrize("retina", [False, True], ids=["input-masks", "retina-masks"])
def test_instances_masks_and_polygons_match_ultralytics(export, retina):
    reference = kit.retina_reference(export) if retina else export
    low_masks, instances = [], 0
    with Segmenter.open(export.onnx, backends="cpu", retina_masks=retina) as segmenter:
        for index, (photo, path) in enumerate(zip(kit.PHOTOS, kit.photos(), strict=True)):
            theirs = reference.reference[photo]
            image = cv2.imread(str(path))
            ours = segmenter(image)
            boxes = np.asarray(theirs["boxes"], np.float32).reshape(-1, 4)
            assert len(ours) == len(boxes), f"{photo}: {len(ours)} instances, Ultralytics " \
                                            f"{len(boxes)}"
            masks = reference.masks(index)
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
                if mask_iou < (0.99 if retina else 0.8):
                    low_masks.append((photo, name, round(mask_iou, 3)))
                # input masks: Ultralytics' per-axis gain vs the letterbox ratio, and the
                # rounding of a point, stay within an input pixel in frame pixels
                tolerance = 1.5 if retina else max(size) / 320 + 1
                assert_same_outline(ours.polygons[j], theirs["polygons"][i], size,
                                    f"{photo}: {name}", tolerance)
                instances += 1
    assert not low_masks, f"masks below IoU {0.99 if retina else 0.8}: {low_masks}"
    assert instances >= 50
