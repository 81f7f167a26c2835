"""DB post-processing: maps to word boxes, PaddleOCR's thresholds and unclip, on drawn maps."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.metrics.text import quad_iou, word_scores
from edgefuse.vision.detect.text_boxes import text_boxes
from edgefuse.vision.scenes.text import text_scene
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")


def _map_with(*rects, value=0.9):
    prob = np.zeros((64, 96), np.float32)
    for x0, y0, x1, y1 in rects:
        prob[y0:y1, x0:x1] = value
    return prob


def test_a_region_is_grown_by_the_unclip_offset():
    (box,) = text_boxes(_map_with((20, 30, 60, 40)))  # pixels 20..59 x 30..39
    # The outline runs through the edge pixels' centres (as in PaddleOCR): a 39 x 9 rectangle,
    # grown on every side by d = A * ratio / L.
    d = 39 * 9 * 1.5 / (2 * 48)
    low, high = box.quad.min(axis=0), box.quad.max(axis=0)
    np.testing.assert_allclose(low, (20 - d, 30 - d), atol=0.01)
    np.testing.assert_allclose(high, (59 + d, 39 + d), atol=0.01)
    assert box.score == pytest.approx(0.9, abs=1e-6)


def test_faint_small_and_sub_threshold_regions_are_dropped():
    assert text_boxes(_map_with((20, 30, 60, 40), value=0.5)) == []  # mean under 0.6
    assert text_boxes(_map_with((20, 30, 60, 40), value=0.29)) == []  # under 0.3: no region
    assert text_boxes(_map_with((20, 30, 60, 32))) == []  # 2 pixels high
    assert len(text_boxes(_map_with((5, 5, 30, 12), (40, 40, 90, 50)))) == 2
    assert len(text_boxes(_map_with((5, 5, 30, 12)).reshape(1, 1, 64, 96))) == 1


def test_the_targets_of_generated_scenes_decode_to_their_words():
    """The shrink (scenes) and the unclip (post-processing) undo each other: decoding the
    training target itself finds the true words."""
    found, truth = [], []
    for index in range(24):
        scene = text_scene(5, index)
        found.append([b.quad for b in text_boxes(scene.target)])
        truth.append(list(scene.quads))
    scores = word_scores(found, truth)
    assert scores["recall"] >= 0.97 and scores["precision"] >= 0.97
    ious = [max(quad_iou(f, t) for f in fs) for fs, ts in zip(found, truth, strict=True)
            for t in ts if fs]
    assert np.median(ious) > 0.7


def test_a_map_of_another_shape_is_refused():
    with pytest.raises(InputError, match=r"\[H, W\] or \[1, 1, H, W\], got \[2, 1, 8, 8\]"):
        text_boxes(np.zeros((2, 1, 8, 8), np.float32))
