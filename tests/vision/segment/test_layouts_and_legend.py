"""Segmentation layouts told from output shapes, the overlay palette against the shapes' hues,
the legend and the instance drawing, on hand-made values."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.preprocess import letterbox
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.legend import draw_legend
from edgefuse.vision.draw.overlay import draw_masks
from edgefuse.vision.model.layouts import detect_layout
from edgefuse.vision.scenes.shapes import CLASS_HUES, HUE_JITTER
from edgefuse.vision.segment.decode import decode
from edgefuse.vision.segment.instances import InstanceMask
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")


@pytest.mark.parametrize(("outputs", "classes", "layout"), [
    ([((1, 21, 64, 64), "float32")], None, "seg_logits"),
    ([((1, 64, 64, 21), "float32")], None, "seg_logits_nhwc"),
    ([((1, 150, 32, 32), "float32")], None, "seg_logits"),  # more classes than pixels a side
    ([((1, 32, 32, 150), "float32")], 150, "seg_logits_nhwc"),
    ([((1, 4, 4, 4), "float32")], 4, "seg_logits"),
    ([((1, 1, 320, 320), "float32")], None, "seg_sigmoid"),
    ([((1, 320, 320, 1), "float32")], None, "seg_sigmoid"),
    ([((1, 116, 8400), "float32"), ((1, 32, 160, 160), "float32")], None, "yolov8_seg"),
    ([((1, 32, 160, 160), "float32"), ((1, 38, 2100), "float32")], 2, "yolov8_seg"),
])
def test_segmentation_layouts_from_output_shapes(outputs, classes, layout):
    named = [(f"out{i}", shape, dtype) for i, (shape, dtype) in enumerate(outputs)]
    assert detect_layout(named, classes) == layout


def test_nhwc_scores_decode_like_the_same_scores_nchw():
    _, geometry = letterbox(np.zeros((50, 100, 3), np.uint8), (64, 64))
    scores = np.random.default_rng(0).normal(size=(1, 5, 16, 16)).astype(np.float32)
    nchw = decode(scores, "seg_logits", geometry)
    nhwc = decode(np.ascontiguousarray(scores.transpose(0, 2, 3, 1)), "seg_logits_nhwc",
                  geometry)
    np.testing.assert_array_equal(nchw.class_map, nhwc.class_map)
    assert nchw.class_map.shape == (50, 100) and len(np.unique(nchw.class_map)) >= 3


def test_the_distinct_palette_does_not_paint_a_shape_in_its_own_colours():
    """The shapes models' objects are painted at CLASS_HUES +- HUE_JITTER (OpenCV hue units,
    saturation >= 150): no saturated overlay colour among the first seven falls in those, and
    each class's own colour, counted from 0 (instances) or from 1 (class maps), is unsaturated or
    at least 85 degrees of hue away from its objects."""
    colours = palette.palette("distinct", 7)
    hsv = cv2.cvtColor(colours[np.newaxis], cv2.COLOR_RGB2HSV)[0].astype(int)

    def distance(a: int, b: int) -> int:
        return min(abs(a - b), 180 - abs(a - b))

    for hue, saturation, _ in hsv:
        if saturation >= 150:
            assert min(distance(hue, h) for h in CLASS_HUES) > HUE_JITTER, hue
    for first in (0, 1):
        for cls, hue in enumerate(CLASS_HUES):
            own, saturation, _ = hsv[first + cls]
            assert saturation < 50 or distance(own, hue) * 2 >= 85, (first, cls)
    assert len({tuple(c) for c in palette.palette("distinct")}) == len(palette.DISTINCT)


def test_the_legend_draws_a_swatch_and_a_name_per_class_top_left():
    image = np.full((120, 160, 3), 200, np.uint8)
    drawn = draw_legend(image.copy(), [("circle", (0, 120, 255)), ("ring", (255, 0, 150))])
    changed = (drawn != image).any(axis=2)
    assert changed[:40, :80].any() and not changed[60:, 100:].any()
    swatch_colours = {tuple(int(v) for v in p) for p in drawn.reshape(-1, 3)}
    assert (0, 120, 255) in swatch_colours and (255, 0, 150) in swatch_colours
    assert draw_legend(image.copy(), []).tolist() == image.tolist()
    many = draw_legend(image.copy(), [(f"c{i}", (i, i, i)) for i in range(30)], max_rows=3)
    four = draw_legend(image.copy(), [(f"c{i}", (i, i, i)) for i in range(4)])
    height = (four != image).any(axis=2).any(axis=1).sum()
    assert (many != image).any(axis=2).any(axis=1).sum() == height < 100  # 3 + "+27 more"


def test_instance_masks_are_blended_in_their_class_colour_and_outlined():
    frame = np.full((20, 20, 3), 100, np.uint8)
    mask = np.zeros((10, 10), bool)
    mask[2:8, 2:8] = True
    colours = np.array([[0, 0, 200], [200, 0, 0]], np.uint8)  # BGR
    out = draw_masks(frame, [InstanceMask(5, 5, mask)], [1], colours, alpha=0.5)
    assert out[10, 10].tolist() == [150, 50, 50]  # inside: half frame, half class 1's colour
    assert out[7, 7].tolist() == [200, 0, 0]  # the outline, in the class colour
    assert out[0, 0].tolist() == [100, 100, 100] and frame[10, 10].tolist() == [100] * 3
