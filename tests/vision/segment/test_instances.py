"""YOLOv8-seg decoding on a real exported graph, against an independent reference written from
Ultralytics' ``non_max_suppression``, ``process_mask``, ``scale_boxes``, ``scale_image`` and
``masks2segments`` in PyTorch (greedy NMS in a loop, the full-size ``F.interpolate``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.vision.segment import instances
from edgefuse.vision.segment.describe import rle
from edgefuse.vision.segment.segmenter import Segmenter
from tests.needs import optional
from tests.vision.segment.heads import YoloV8SegLike, export

pytestmark = pytest.mark.torch

torch = optional("torch")
cv2 = optional("cv2")
F = torch.nn.functional

CLASSES = ("cat", "dog", "fish")
CONF, IOU = 0.5, 0.5
# A 48 x 96 frame in a 64 x 64 input: gain 2/3, content 32 x 64, 16 rows of padding above and
# below, so Ultralytics' float pads (scale_image) and the letterbox's integer pads agree.
FRAME = (48, 96)
TOP = 16


@pytest.fixture(scope="module")
def seg_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("seg") / "yolov8_seg_like.onnx"
    export(YoloV8SegLike(len(CLASSES)), path, outputs=("output0", "output1"))
    return path


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(3)
    image = cv2.GaussianBlur(rng.integers(0, 256, (*FRAME, 3), dtype=np.uint8), (7, 7), 0)
    return np.ascontiguousarray(image)


def _reference(prediction, protos, input_size, frame_size):
    """Ultralytics' steps, independently: boxes, scores, classes, frame masks, polygons."""
    x = torch.from_numpy(prediction)[0].T  # [N, 4 + C + 32]
    nc = len(CLASSES)
    box = torch.cat([x[:, :2] - x[:, 2:4] / 2, x[:, :2] + x[:, 2:4] / 2], 1)
    conf, j = x[:, 4:4 + nc].max(1)
    keep = conf > CONF
    box, conf, j, coef = box[keep], conf[keep], j[keep], x[keep, 4 + nc:]
    order = conf.argsort(descending=True, stable=True)
    offset = box + j[:, None].float() * 7680  # Ultralytics' class offset
    kept = []
    for i in order.tolist():
        if all(_iou(offset[i], offset[k]) <= IOU for k in kept):
            kept.append(i)
    box, conf, j, coef = box[kept], conf[kept], j[kept], coef[kept]
    # 8.4's process_mask(protos, coef, box, input_size, upsample=True): upsample, > 0, then
    # crop at input resolution; construct_result drops the instances whose mask is empty
    c, mh, mw = protos.shape[1:]
    proto = torch.from_numpy(protos)[0]
    masks = (coef @ proto.view(c, -1)).view(-1, mh, mw)
    masks = F.interpolate(masks[None], input_size, mode="bilinear", align_corners=False)[0]
    masks = masks.gt(0.0).byte()
    ih, iw = input_size
    r = torch.arange(iw, dtype=box.dtype)[None, None, :]
    rows = torch.arange(ih, dtype=box.dtype)[None, :, None]
    x1, y1, x2, y2 = torch.chunk(box[:, :, None], 4, 1)
    masks = masks * ((r >= x1) * (r < x2) * (rows >= y1) * (rows < y2))
    keep = masks.amax((-2, -1)) > 0
    box, conf, j, masks = box[keep], conf[keep], j[keep], masks[keep].numpy().astype(np.uint8)
    # scale_boxes / scale_image / masks2segments + scale_coords, with this frame's exact pads
    gain = min(ih / frame_size[0], iw / frame_size[1])
    frame_boxes = box.numpy().copy()
    frame_boxes[:, [1, 3]] -= TOP
    frame_boxes /= gain
    frame_boxes[:, [0, 2]] = frame_boxes[:, [0, 2]].clip(0, frame_size[1])
    frame_boxes[:, [1, 3]] = frame_boxes[:, [1, 3]].clip(0, frame_size[0])
    frame_masks = [cv2.resize(m[TOP:ih - TOP], frame_size[::-1], interpolation=cv2.INTER_NEAREST)
                   for m in masks]
    polygons = []
    for m in masks:
        contours = cv2.findContours(m, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)[0]
        if not contours:
            polygons.append(np.zeros((0, 2), np.float32))
            continue
        # masks2segments(strategy="all"): Ultralytics' merge_multi_segment joins the contours
        # (edgefuse's port of it here; tests/vision/segment/test_ultralytics_seg_export.py
        # checks the outlines against Ultralytics' own masks.xy)
        points = (np.concatenate(instances.merge_multi_segment([k.reshape(-1, 2)
                                                                for k in contours]))
                  if len(contours) > 1 else contours[0].reshape(-1, 2))
        points = points.astype(np.float32)
        points[:, 1] -= TOP
        points /= gain
        points[:, 0] = points[:, 0].clip(0, frame_size[1])
        points[:, 1] = points[:, 1].clip(0, frame_size[0])
        polygons.append(points)
    return frame_boxes, conf.numpy(), j.numpy(), frame_masks, polygons


def _iou(a, b) -> float:
    w = (torch.minimum(a[2], b[2]) - torch.maximum(a[0], b[0])).clamp(min=0)
    h = (torch.minimum(a[3], b[3]) - torch.maximum(a[1], b[1])).clamp(min=0)
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union)


def test_instances_match_ultralytics_on_an_exported_yolov8_seg_head(seg_onnx, frame):
    with Segmenter.open(seg_onnx, backends="cpu", class_names=CLASSES, conf=CONF,
                        iou=IOU) as segmenter:
        assert segmenter.layout == "yolov8_seg"
        feeds, geometry = segmenter.preprocess(frame)
        outputs = segmenter.infer(feeds)
        result = segmenter.postprocess(outputs, geometry)
    assert (geometry.pad_top, geometry.content_size) == (TOP, (32, 64))
    boxes, scores, classes, masks, polygons = _reference(
        outputs["output0"], outputs["output1"], (64, 64), FRAME)
    assert len(result) == len(scores) >= 3  # 8.4 drops the 28 instances with an empty mask
    np.testing.assert_allclose(result.detections.boxes, boxes, atol=1e-3)
    np.testing.assert_allclose(result.detections.scores, scores, rtol=1e-6)
    assert result.detections.classes.tolist() == classes.tolist()
    assert len(masks) >= 5
    for index, (mask, expected) in enumerate(zip(result.masks, masks, strict=True)):
        np.testing.assert_array_equal(mask.paste(FRAME), expected.astype(bool),
                                      err_msg=f"instance {index}")
        np.testing.assert_allclose(result.polygons[index], polygons[index], atol=1e-3)
    assert result.class_counts().tolist() == np.bincount(classes, minlength=3).tolist()


def test_the_record_lists_instances_with_polygons_or_rle_and_counts(seg_onnx, frame):
    with Segmenter.open(seg_onnx, backends="cpu", class_names=CLASSES, conf=CONF,
                        iou=IOU) as polygons, Segmenter.open(
            seg_onnx, backends="cpu", class_names=CLASSES, conf=CONF, iou=IOU,
            mask_format="rle") as runs:
        result = polygons(frame)
        as_polygons, as_runs = polygons.describe(result), runs.describe(result)
    json.dumps(as_polygons), json.dumps(as_runs)
    counts = result.class_counts()
    assert as_polygons["counts"] == {CLASSES[c]: int(counts[c]) for c in np.flatnonzero(counts)}
    first = as_polygons["instances"][0]
    assert first["class"] == CLASSES[first["class_id"]] and first["area"] == result.masks[0].area
    assert len(first["polygon"]) == len(result.polygons[0]) >= 3
    for item, mask in zip(as_runs["instances"], result.masks, strict=True):
        assert item["rle"]["size"] == list(FRAME)
        np.testing.assert_array_equal(_decode_rle(item["rle"]), mask.paste(FRAME))


def _decode_rle(encoded) -> np.ndarray:
    """COCO's uncompressed RLE, decoded as pycocotools does: alternating runs, column-major."""
    values = np.concatenate([np.full(n, i % 2, bool) for i, n in enumerate(encoded["counts"])])
    return values.reshape(encoded["size"][::-1]).T


def test_rle_of_a_mask_that_starts_with_foreground():
    mask = np.array([[1, 0], [1, 1]], bool)  # column-major: 1, 1, 0, 1
    assert rle(mask) == {"size": [2, 2], "counts": [0, 2, 1, 1]}


def test_the_drawing_fills_each_mask_and_adds_a_legend(seg_onnx, frame):
    with Segmenter.open(seg_onnx, backends="cpu", class_names=CLASSES, conf=CONF, iou=IOU,
                        alpha=0.5) as segmenter:
        result = segmenter(frame)
        drawn = segmenter.annotate(frame, result)
        segmenter.legend = False
        plain = segmenter.annotate(frame, result)
    painted = np.zeros(FRAME, bool)
    for mask in result.masks:
        painted |= mask.paste(FRAME)
    assert (plain != frame).any(axis=2)[painted].all()  # every mask pixel is painted
    legend = (drawn != plain).any(axis=2)  # the legend's panel, and labels moved off it
    assert legend[:3, :3].all() and not legend.all()  # the panel starts at the top-left corner


def test_a_class_count_that_disagrees_with_the_names_is_refused_before_any_frame(seg_onnx):
    with pytest.raises(InputError, match=r"has 3 classes \(its predictions \[1, 39, 80\] less 4 "
                                         r"box values and 32 mask coefficients\), but "
                                         r"class_names lists 2: cat, dog") as caught:
        Segmenter.open(seg_onnx, backends="cpu", class_names=("cat", "dog"))
    assert "set class_names to the model's 3 class names" in caught.value.hint


def test_split_outputs_names_what_it_found():
    with pytest.raises(InputError, match="two outputs"):
        instances.split_outputs({"a": np.zeros((1, 39, 80), np.float32)})
    with pytest.raises(InputError, match="no room for 4 box values"):
        instances.split_outputs({"a": np.zeros((1, 36, 80), np.float32),
                                 "b": np.zeros((1, 32, 16, 16), np.float32)})
