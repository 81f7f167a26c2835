"""The trained instance variant ``shapes_yolov8_seg``: its record, that it keeps the detector as
shipped, and that the segmentation app, given its ONNX export, finds each held-out object's mask
on real pixels (generated scenes, scored against the scene's own instance map), better than the
true box filled would."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest

from edgefuse.model_info import AppInfo, embed
from edgefuse.models import _trained, shapes
from edgefuse.models.yolov8_seg import trained_yolov8_seg_shapes
from edgefuse.vision.scenes.shapes import CLASSES, SceneGenerator
from edgefuse.vision.segment.segmenter import Segmenter
from tests.needs import optional

pytestmark = pytest.mark.torch

torch = optional("torch")
optional("cv2")

WEIGHTS = _trained.WEIGHTS_DIR / f"{shapes.INSTANCE}.pt"


@pytest.fixture(scope="module")
def record():
    return json.loads(shapes.RECORD_FILE.read_text())["models"][shapes.INSTANCE]


@pytest.fixture(scope="module")
def instance_onnx(tmp_path_factory):
    model = trained_yolov8_seg_shapes()
    path = tmp_path_factory.mktemp("instance") / "shapes_yolov8_seg.onnx"
    torch.onnx.export(model, (torch.zeros(1, 3, *shapes.DETECTOR_INPUT),), str(path),
                      dynamo=False, opset_version=17, input_names=["images"],
                      output_names=["output0", "output1"])
    info = AppInfo.from_dict(shapes.instance_app_info())
    onnx.save(embed(onnx.load(str(path)), info), str(path))
    return path


def test_the_record_describes_the_shipped_weights(record):
    assert record["bytes"] == WEIGHTS.stat().st_size <= 256 * 2**10
    assert record["sha256"] == hashlib.sha256(WEIGHTS.read_bytes()).hexdigest()
    assert record["app"] == shapes.app_info(shapes.INSTANCE, CLASSES)
    assert record["app"]["postprocess"]["layout"] == "yolov8_seg"


def test_the_file_holds_the_mask_branch_alone():
    """The detector ships once (shapes_yolov8.pt); the instance file adds the mask branch."""
    keys = torch.load(WEIGHTS, weights_only=True).keys()
    assert keys and all(key.startswith(("proto.", "cv4.")) for key in keys)


def test_the_app_finds_each_objects_mask_on_held_out_scenes(instance_onnx, record):
    generator = SceneGenerator(record["scene_seed"], (240, 320))
    first = json.loads(shapes.RECORD_FILE.read_text())["generator"]["held_out_start"]
    best, boxes_as_masks = [], []
    with Segmenter.open(instance_onnx, backends="cpu") as segmenter:
        assert segmenter.layout == "yolov8_seg" and segmenter.class_names == CLASSES
        for index in range(first + 500, first + 520):  # past the scenes the record scored
            scene = generator.scene(index)
            result = segmenter(scene.image)
            masks = [m.paste(scene.image.shape[:2]) for m in result.masks]
            for k, cls in enumerate(scene.classes):
                truth = scene.instances == k + 1
                ious = [(m & truth).sum() / (m | truth).sum()
                        for m, c in zip(masks, result.detections.classes, strict=True)
                        if c == cls]
                best.append(max(ious, default=0.0))
                x1, y1, x2, y2 = scene.boxes[k].astype(int)  # the true box, filled: the
                boxes_as_masks.append(truth.sum() / ((x2 - x1) * (y2 - y1)))  # box's own IoU
        record_line = segmenter.describe(result)
    best_array = np.array(best)
    assert len(best) >= 40
    # measured when written: mean 0.656, 92% of objects over 0.5, the true boxes filled 0.552
    assert best_array.mean() > 0.6, best_array.mean()
    assert (best_array > 0.5).mean() > 0.85, (best_array > 0.5).mean()
    assert best_array.mean() > np.mean(boxes_as_masks) + 0.05  # more than a box: the shape
    assert sum(record_line["counts"].values()) == len(record_line["instances"]) == len(result)

