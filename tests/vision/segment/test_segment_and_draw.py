"""Segmentation decodes, palettes, the overlay and box drawing, on hand-made values."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.metrics.detect import Detections
from edgefuse.preprocess import letterbox
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.overlay import draw_detections, overlay
from edgefuse.vision.draw.text import text_colour
from edgefuse.vision.segment.decode import decode
from tests.needs import optional

pytestmark = pytest.mark.unit

optional("cv2")

# A 50 x 100 frame letterboxed into 65 x 64: content rows 16..47, scale 0.64.
_, GEOMETRY = letterbox(np.zeros((50, 100, 3), np.uint8), (65, 64))


def test_logits_argmax_at_model_resolution_then_nearest_to_the_frame():
    logits = np.zeros((1, 3, 65, 64), np.float32)
    logits[0, 2] = 1.0  # padding and everything else: class 2 ...
    logits[0, 1, 16:48, :32] = 5.0  # ... but the left half of the content is class 1
    logits[0, 0, :16] = 9.0  # the padding says class 0: it must not reach the frame
    result = decode(logits, "seg_logits", GEOMETRY)
    assert result.class_map.shape == (50, 100) and result.class_map.dtype == np.uint8
    assert (result.class_map[:, :50] == 1).all() and (result.class_map[:, 50:] == 2).all()
    assert result.num_classes == 3
    assert result.pixel_counts().tolist() == [0, 2500, 2500]


def test_sigmoid_mask_thresholds_the_probability():
    logits = np.full((1, 1, 65, 64), -3.0, np.float32)
    logits[0, 0, 16:48, 32:] = 0.5  # sigmoid 0.62
    assert decode(logits, "seg_sigmoid", GEOMETRY).pixel_counts().tolist() == [2500, 2500]
    strict = decode(logits, "seg_sigmoid", GEOMETRY, threshold=0.7)
    assert strict.pixel_counts().tolist() == [5000, 0]
    with pytest.raises(InputError, match="one channel"):
        decode(np.zeros((1, 2, 65, 64), np.float32), "seg_sigmoid", GEOMETRY)


def test_argmax_maps_from_the_model_are_taken_as_they_are():
    ids = np.zeros((1, 65, 64), np.int64)
    ids[0, 16:48, 32:] = 4
    result = decode(ids, "seg_argmax", GEOMETRY, num_classes=5)
    assert result.pixel_counts().tolist() == [2500, 0, 0, 0, 2500]
    assert decode(ids[:, np.newaxis], "seg_argmax", GEOMETRY).num_classes == 5


def test_voc_and_cityscapes_palettes():
    voc = palette.voc()
    assert voc.shape == (256, 3)
    assert voc[:5].tolist() == [[0, 0, 0], [128, 0, 0], [0, 128, 0], [128, 128, 0], [0, 0, 128]]
    assert voc[8].tolist() == [64, 0, 0] and voc[15].tolist() == [192, 128, 128]  # person
    city = palette.palette("cityscapes")
    assert city[0].tolist() == [128, 64, 128] and city[18].tolist() == [119, 11, 32]
    assert palette.palette([[1, 2, 3], "#ff0080"], count=3).tolist() == [
        [1, 2, 3], [255, 0, 128], [1, 2, 3]]
    assert palette.bgr(palette.palette([[1, 2, 3]]))[0].tolist() == [3, 2, 1]
    with pytest.raises(InputError, match="unknown palette 'vocc'"):
        palette.palette("vocc")
    with pytest.raises(InputError, match="bad palette colour"):
        palette.palette([[300, 0, 0]])


def test_overlay_blends_only_outside_the_background():
    frame = np.full((2, 2, 3), 100, np.uint8)
    class_map = np.array([[0, 1], [2, 0]], np.uint8)
    colours = np.array([[0, 0, 0], [200, 0, 50], [0, 250, 0]], np.uint8)  # BGR
    out = overlay(frame, class_map, colours, alpha=0.5, background=0)
    assert out[0, 0].tolist() == [100, 100, 100] and out[1, 1].tolist() == [100, 100, 100]
    assert out[0, 1].tolist() == [150, 50, 75]  # 0.5 * 100 + 0.5 * colour
    assert out[1, 0].tolist() == [50, 175, 50]
    everywhere = overlay(frame, class_map, colours, alpha=0.25, background=None)
    assert everywhere[0, 0].tolist() == [75, 75, 75]
    assert frame[0, 1].tolist() == [100, 100, 100]  # the input is untouched


def test_outline_draws_region_borders_in_their_class_colour():
    frame = np.full((4, 6, 3), 100, np.uint8)
    class_map = np.zeros((4, 6), np.uint8)
    class_map[1:3, 1:4] = 1  # a 2x3 region: every pixel of it touches the background
    class_map[:, 5] = 2
    colours = np.array([[0, 0, 0], [200, 0, 50], [0, 250, 0]], np.uint8)
    out = overlay(frame, class_map, colours, alpha=0.5, background=0, outline=True)
    assert out[1, 1].tolist() == [200, 0, 50] and out[2, 3].tolist() == [200, 0, 50]
    assert out[0, 5].tolist() == [0, 250, 0]  # class 2 borders the background to its left
    assert out[0, 0].tolist() == [100, 100, 100]  # background borders are not drawn
    wide = np.zeros((9, 9), np.uint8)
    wide[1:8, 1:8] = 1
    inside = overlay(np.full((9, 9, 3), 100, np.uint8), wide, colours, alpha=0.5, outline=True)
    assert inside[4, 4].tolist() == [150, 50, 75]  # the interior is blended, not outlined
    assert inside[1, 4].tolist() == inside[2, 4].tolist() == [200, 0, 50]  # a 2-pixel band
    assert inside[3, 4].tolist() == [150, 50, 75]


def test_boxes_are_drawn_in_their_class_colour_on_a_copy():
    frame = np.zeros((40, 60, 3), np.uint8)
    detections = Detections(np.array([[10, 20, 50, 35]], np.float32), np.array([0.9]),
                            np.array([1]))
    colours = np.array([[0, 0, 255], [0, 255, 0]], np.uint8)
    out = draw_detections(frame, detections, ["a", "b"], colours, line_width=1, labels=False)
    assert out[20, 30].tolist() == [0, 255, 0] and out[35, 30].tolist() == [0, 255, 0]
    assert out[27, 30].tolist() == [0, 0, 0]  # inside the box: untouched
    assert frame.sum() == 0
    labelled = draw_detections(frame, detections, ["a", "b"], colours, line_width=1)
    assert (labelled[:20] != 0).any()  # the label sits above the box
    assert text_colour((255, 255, 255)) == (0, 0, 0) and text_colour((0, 255, 255)) == (0, 0, 0)
    assert text_colour((255, 0, 0)) == (255, 255, 255)  # BGR blue: white text
