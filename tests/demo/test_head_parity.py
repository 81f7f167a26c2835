"""The demo's YoloHead-vs-host-decode figure on hand-built frames: which frames agree, and the
worst IoU of a matched pair computed by hand."""

import numpy as np
import pytest

from edgefuse.demo.head_parity import HeadParity, head_parity
from edgefuse.metrics.detect import Detections

pytestmark = pytest.mark.unit

HOST = ([[0, 0, 40, 40], [100, 100, 160, 130]], [0.9, 0.6], [1, 4])


def frame(boxes, scores, classes) -> Detections:
    return Detections(np.array(boxes, np.float32).reshape(-1, 4), np.array(scores, np.float32),
                      np.array(classes, np.int64))


def test_fp16_sized_differences_agree_and_the_worst_iou_is_the_lowest_pair():
    host = frame(*HOST)
    # listed in the other order, the first box one pixel to the right, scores 0.005 apart
    board = frame([[100, 100, 160, 130], [1, 0, 41, 40]], [0.6, 0.895], [4, 1])
    result = head_parity([board, host], [host, host])
    inter = 39 * 40
    assert result == HeadParity(frames=2, agreeing=2,
                                worst_iou=pytest.approx(inter / (2 * 1600 - inter)))
    assert result.describe() == "2/2 frames, worst IoU 0.951"


@pytest.mark.parametrize("board", [
    frame([[0, 0, 40, 40], [100, 100, 160, 130]], [0.9, 0.6], [1, 3]),  # another class
    frame([[0, 0, 40, 40]], [0.9], [1]),  # a box the device suppressed
    frame([*HOST[0], [200, 10, 230, 50]], [*HOST[1], 0.3], [*HOST[2], 2]),  # one box more
    frame(HOST[0], [0.9, 0.58], HOST[2]),  # a score 0.02 off
    frame([[6, 0, 46, 40], [100, 100, 160, 130]], HOST[1], HOST[2]),  # IoU 34/46 < 0.9
], ids=["class", "missing", "extra", "score", "box"])
def test_a_frame_with_any_detection_changed_disagrees(board):
    host = frame(*HOST)
    assert head_parity([host, board], [host, host]).agreeing == 1


def test_frames_without_detections_agree_with_no_iou_to_quote():
    empty = frame([], [], [])
    result = head_parity([empty], [empty])
    assert result == HeadParity(frames=1, agreeing=1, worst_iou=None)
    assert result.describe() == "1/1 frames"


def test_runs_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="2 board frames against 1 host frames"):
        head_parity([frame(*HOST)] * 2, [frame(*HOST)])
