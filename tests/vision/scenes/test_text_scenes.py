"""Generated text scenes: a function of (seed, index), and labels that say where the ink went.

The label checks watch each word being drawn (the image and the target before and after it) and
hold the returned box and the target to the pixels that actually changed, independently of how the
generator computed them.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.vision.scenes import text as text_scenes
from edgefuse.vision.scenes.text import shrink_distance, text_scene, write_text_images
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")

INK = 30  # grey levels a drawn word changes a pixel by, at least, to count as its ink


def test_a_scene_is_a_function_of_seed_and_index_and_leaves_the_global_rng_alone():
    state = np.random.get_state()
    first, again = text_scene(3, 5), text_scene(3, 5)
    assert np.array_equal(first.image, again.image) and np.array_equal(first.target, again.target)
    assert np.array_equal(first.quads, again.quads) and first.words == again.words
    assert not np.array_equal(first.image, text_scene(3, 6).image)
    assert not np.array_equal(first.image, text_scene(4, 5).image)
    after = np.random.get_state()
    assert state[0] == after[0] and np.array_equal(state[1], after[1])


def test_shapes_and_types():
    scene = text_scene(0, 1, size=(64, 96), max_words=3)
    assert scene.image.shape == (64, 96, 3) and scene.image.dtype == np.uint8
    assert scene.target.shape == (64, 96) and scene.target.dtype == np.float32
    assert set(np.unique(scene.target)) <= {0.0, 1.0}
    assert scene.quads.shape == (len(scene.words), 4, 2) and 1 <= len(scene.words) <= 3


def test_the_shrink_is_dbs():
    # A (1 - r^2) / L with r = 0.4: 100 x 20 -> 2000 * 0.84 / 240
    assert shrink_distance(100, 20) == pytest.approx(7.0)


def test_each_words_box_holds_its_ink_and_its_target_lies_on_the_ink(monkeypatch):
    drawn = []
    place = text_scenes._place_word

    def watched(rng, image, occupied, target, cv2_module):
        before, target_before = image.copy(), target.copy()
        placed = place(rng, image, occupied, target, cv2_module)
        if placed is not None:
            change = np.abs(image - before).max(axis=2)
            drawn.append((placed[0], change > INK, (target > target_before)))
        return placed

    monkeypatch.setattr(text_scenes, "_place_word", watched)
    for index in range(12):
        text_scene(7, index)
    assert len(drawn) > 20
    for quad, ink, shrunk in drawn:
        inside = _within(quad, 1.0)
        assert ink.any() and shrunk.any()
        assert not (ink & ~inside).any(), "ink outside the word's box"
        assert not (shrunk & ~_within(quad, 0.0)).any(), "target outside the word's box"
        # the box is tight: ink reaches within 2 pixels of each of its four sides (the faint
        # anti-aliased rim the box also holds does not count as ink here)
        ys, xs = np.nonzero(ink)
        points = np.stack([xs, ys], 1).astype(np.float64)
        for k in range(4):
            assert _distance_to_line(points, quad[k], quad[(k + 1) % 4]).min() < 2.0
        # the target is the shrunk box: its area is (w - 2D)(h - 2D) of the box
        w, h = np.linalg.norm(quad[1] - quad[0]), np.linalg.norm(quad[3] - quad[0])
        d = shrink_distance(w, h)
        expected = max(w - 2 * d, 1) * max(h - 2 * d, 1)
        assert abs(shrunk.sum() - expected) <= 0.25 * expected + 2 * (w + h - 4 * d)
        # and it lies on the word: most of it is within a stroke's reach of ink
        near_ink = cv2.dilate(ink.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
        assert (shrunk & near_ink).sum() >= 0.6 * shrunk.sum()


def test_the_folder_holds_the_scenes_as_lossless_pngs(tmp_path):
    paths = write_text_images(tmp_path / "images", seed=2, count=3, start=4)
    assert [p.name for p in paths] == ["00004.png", "00005.png", "00006.png"]
    for index, path in zip(range(4, 7), paths, strict=True):
        assert np.array_equal(cv2.imread(str(path)), text_scene(2, index).image)


def test_a_bad_size_is_refused():
    with pytest.raises(InputError, match="height must be at least 32, got 16"):
        text_scene(0, 0, size=(16, 64))
    with pytest.raises(InputError, match=r"size must be \(height, width\)"):
        text_scene(0, 0, size=160)


def _within(quad: np.ndarray, margin: float, size: int = 160) -> np.ndarray:
    """Pixels whose centre is on the inner side of all four edges of the convex ``quad``, or
    within ``margin`` outside of one."""
    ys, xs = np.mgrid[0:size, 0:size]
    points = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
    first, second = quad[1] - quad[0], quad[2] - quad[1]
    orientation = np.sign(first[0] * second[1] - first[1] * second[0])
    inside = np.ones(len(points), bool)
    for k in range(4):
        start, end = quad[k].astype(np.float64), quad[(k + 1) % 4].astype(np.float64)
        edge = (end - start) / np.linalg.norm(end - start)
        offset = points - start
        signed = orientation * (edge[0] * offset[:, 1] - edge[1] * offset[:, 0])
        inside &= signed >= -margin
    return inside.reshape(size, size)


def _distance_to_line(points: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    direction = (end - start) / np.linalg.norm(end - start)
    offset = points - start
    return np.abs(offset[:, 0] * direction[1] - offset[:, 1] * direction[0])
