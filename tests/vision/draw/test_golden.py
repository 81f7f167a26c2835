"""Golden images: the fixed scenes of ``scenes.py`` drawn by the apps' own annotators, compared
with committed PNGs (``golden/``) within a tolerance for OpenCV's anti-aliasing across versions.

After a deliberate change to the drawing, look at the new pictures
(``python -m tests.vision.draw.scenes /tmp/scenes``), then rewrite the golden images with
``python -m tests.vision.draw.scenes --golden`` and commit them.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.vision.scenes.shapes import CLASSES, SceneGenerator
from edgefuse.vision.segment.decode import Segmentation
from edgefuse.vision.segment.segmenter import Segmenter
from tests.needs import optional

pytestmark = pytest.mark.ort
cv2 = optional("cv2")
from tests.vision.draw import scenes  # noqa: E402 - after cv2 is known
from tests.vision.models import channel_logits_model  # noqa: E402

MEAN_TOLERANCE = 1.0  # mean absolute difference per channel value
CHANGED_TOLERANCE = 0.005  # share of pixels allowed to differ by more than CHANGED_BY
CHANGED_BY = 48


@pytest.mark.parametrize("name", sorted(scenes.SCENES))
def test_the_scene_looks_like_its_golden_image(name, tmp_path):
    drawn = scenes.SCENES[name]()
    golden = cv2.imread(str(scenes.GOLDEN / f"{name}.png"))
    assert golden is not None, f"no {name}.png: python -m tests.vision.draw.scenes --golden"
    assert drawn.shape == golden.shape
    difference = np.abs(drawn.astype(np.int16) - golden.astype(np.int16))
    changed = float((difference.max(axis=2) > CHANGED_BY).mean())
    if difference.mean() > MEAN_TOLERANCE or changed > CHANGED_TOLERANCE:
        cv2.imwrite(str(tmp_path / f"{name}.png"), drawn)
        pytest.fail(f"{name} differs from its golden image (mean {difference.mean():.2f}, "
                    f"{changed:.2%} of pixels changed); drawn: {tmp_path / name}.png")


def test_a_small_change_to_the_drawing_fails_the_comparison():
    """The tolerance is not so loose that a moved label passes: the crowded scene shifted by
    three pixels differs from its golden image."""
    golden = cv2.imread(str(scenes.GOLDEN / "crowded.png")).astype(np.int16)
    shifted = np.roll(golden, 3, axis=1)
    difference = np.abs(shifted - golden)
    assert (difference.max(axis=2) > CHANGED_BY).mean() > CHANGED_TOLERANCE


def test_the_legend_keeps_class_order_whatever_covers_most_pixels():
    """Two frames whose classes cover the frame in opposite proportions draw the same legend."""
    image = SceneGenerator(0, scenes.SIZE).scene(0).image
    names = ("background", *CLASSES)
    first = np.zeros(scenes.SIZE, np.uint8)
    first[:, :200], first[:, 200:260] = 2, 5
    second = np.zeros(scenes.SIZE, np.uint8)
    second[:, :60], second[:, 60:260] = 2, 5
    with Segmenter.open(channel_logits_model(), backends="cpu", class_names=names[:3]) as task:
        task.class_names = names
        one = task.annotate(image, Segmentation(first, len(names)))
        two = task.annotate(image, Segmentation(second, len(names)))
    legend = (slice(0, 40), slice(0, 30))  # the two rows' swatches, top left
    assert (one[legend] != image[legend]).any() and (one[legend] == two[legend]).all()
