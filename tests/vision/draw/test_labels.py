"""Labels that stay readable: one per object, ID first, inside the frame, off each other and off
the panels; text sized from the frame; the scene-aware palette."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.metrics.detect import Detections
from edgefuse.vision.analytics.task import TrackedResult, _objects
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.labels import LabelPlacer, overlaps
from edgefuse.vision.draw.overlay import label_text, place_labels
from edgefuse.vision.draw.panel import panel_rect
from edgefuse.vision.draw.text import TextStyle
from edgefuse.vision.scenes.shapes import CLASSES
from edgefuse.vision.track.byte_tracker import Tracks
from tests.needs import optional

pytestmark = pytest.mark.unit
optional("cv2")
from tests.vision.draw.scenes import crowded_detections  # noqa: E402 - after cv2 is known


def _inside(rect, width, height):
    return 0 <= rect[0] < rect[2] <= width and 0 <= rect[1] < rect[3] <= height


@pytest.mark.parametrize(("size", "count", "labelled"), [
    ((240, 320), 30, 30), ((720, 1280), 100, 100),  # crowded: every object keeps its label
    ((240, 320), 80, 40),  # more labels than the frame holds: at least half, none overlapping
])
def test_no_two_labels_overlap_on_a_crowded_frame_and_all_are_inside_it(size, count, labelled):
    """Boxes (some cut by the frame's edges) in a frame that also has a counts panel in its
    top-right corner: labels inside the frame, overlapping no other label and not the panel;
    one per object while the frame has room for them."""
    height, width = size
    detections = crowded_detections(count=count, size=size)
    style = TextStyle.for_frame(height, width)
    panel = panel_rect(size, [("middle: in 12 out 3", (0, 215, 255))], style, corner="top-right")
    placed = place_labels(detections, CLASSES, style, LabelPlacer(width, height, [panel]))
    indices = [index for index, _, _ in placed]
    assert len(set(indices)) == len(indices) >= labelled
    rects = [rect for _, _, rect in placed]
    assert all(_inside(rect, width, height) for rect in rects)
    assert not any(overlaps(rect, panel) for rect in rects)
    crossing = [(a, b) for i, a in enumerate(rects) for b in rects[i + 1:] if overlaps(a, b)]
    assert crossing == []


def test_a_label_at_the_frame_edge_is_moved_inside_it_whole():
    style = TextStyle.for_frame(240, 320)
    text = label_text(CLASSES, 2, 0.9)
    size = style.size(text)
    right = LabelPlacer(320, 240).place(size, (300, 100, 320, 140))
    top = LabelPlacer(320, 240).place(size, (10, 0, 40, 30))
    assert right[2] == 320 and right[2] - right[0] == size[0]  # not cut: "triangl"
    assert top[1] >= 0 and top[3] - top[1] == size[1]
    first = LabelPlacer(320, 240).place(size, (100, 100, 140, 140))
    assert first == (100, 100 - size[1], 100 + size[0], 100)  # the usual spot: above, left


def test_the_id_comes_first_and_each_object_has_one_label():
    assert label_text(("person",), 0, 0.912, 7) == "#7 person 0.91"
    assert label_text(("person",), 0, 0.912) == "person 0.91"
    assert label_text(("person",), 3, 0.5) == "class3 0.50"
    boxes = np.array([[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]], np.float32)
    detections = Detections(boxes, np.array([0.9, 0.3, 0.8], np.float32), np.array([0, 0, 1]))
    tracks = Tracks(boxes[[2, 0]], np.array([0.8, 0.9], np.float32), np.array([1, 0]),
                    np.array([5, 9]), np.array([2, 0]))
    objects, ids = _objects(TrackedResult(detections, tracks, [], {}))
    assert ids.tolist() == [5, 9, -1]  # the two tracks, then the detection no track took
    assert objects.boxes.tolist() == boxes[[2, 0, 1]].tolist()
    texts = [text for _, text, _ in place_labels(objects, ("a", "b"), TextStyle.for_frame(
        100, 100), LabelPlacer(100, 100), ids)]
    assert texts == ["#9 a 0.90", "#5 b 0.80", "a 0.30"]  # best score first


def test_text_grows_with_the_frame_and_stays_legible_on_small_ones():
    small, hd, full = (TextStyle.for_frame(*s) for s in ((240, 320), (720, 1280), (1080, 1920)))
    assert small.scale == 0.4 and small.size("Ag")[1] >= 12  # the floor
    assert small.scale < hd.scale < full.scale and full.thickness == 2
    assert full.size("person 0.91")[1] > 2 * small.size("person 0.91")[1]


def test_the_palette_moves_the_scenes_own_colours_to_the_end_once():
    colours = palette.distinct()
    azure = int(np.flatnonzero((colours == (0, 140, 255)).all(axis=1))[0])
    sky = np.zeros((60, 80, 3), np.uint8)
    sky[:] = (255, 140, 0)  # BGR: the palette's azure
    sky[40:] = 0  # black: no palette colour is near it
    reordered = [c.tolist() for c in palette.avoiding(colours, sky)]
    blues = [[0, 140, 255], [100, 170, 255]]  # the sky's colour and the light azure near it
    assert sorted(reordered[-2:]) == blues  # moved behind the others
    kept = [c.tolist() for c in colours if c.tolist() not in blues]
    assert reordered[:-2] == kept  # the others keep their order
    assert azure == 4
    aware = palette.SceneAware(colours)
    grey = np.full((60, 80, 3), 114, np.uint8)
    assert aware.colours(grey, 3).tolist() == palette.bgr(colours[:3]).tolist()  # flat: not yet
    chosen = aware.colours(sky, len(colours))
    assert [255, 140, 0] in chosen[-2:].tolist()
    other = np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8)
    assert aware.colours(other, len(colours)).tolist() == chosen.tolist()  # fixed for the run
