"""The detection and segmentation apps on AIPP builds, on the simulated board against the host,
through the pytest kit (its fixtures and assertions), and the segment app run with --backend sim."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model
from edgefuse.cli.main import main
from edgefuse.model_info import AppInfo, embed
from edgefuse.testing import assert_detections_match, assert_masks_match
from tests.model_builders import IR_VERSION, OPSET
from tests.needs import optional
from tests.vision.models import red_mask_model, yolov8_output

pytestmark = pytest.mark.ort

cv2 = optional("cv2")


def _aipp_build(tmp_path, model: onnx.ModelProto, info: dict, name: str):
    source = tmp_path / f"{name}.onnx"
    onnx.save(embed(model, AppInfo.from_dict(info)), source)
    spec = AippSpec.from_dict({"input_format": "BGR888", "source_size": [32, 32],
                               "scale": 1 / 255})
    return compile_model(source, "Ascend310B4", tmp_path / name, aipp=spec).output_dir


@pytest.fixture
def frames(tmp_path):
    """Frames with red discs of several sizes on grey, as image files."""
    folder = tmp_path / "frames"
    folder.mkdir()
    for index, radius in enumerate((6, 11, 15)):
        image = np.full((48, 64, 3), 90, np.uint8)
        cv2.circle(image, (20 + 8 * index, 24), radius, (40, 40, 230), -1)
        cv2.imwrite(str(folder / f"{index}.png"), image)
    return folder


@pytest.fixture(autouse=True)
def no_atc(monkeypatch):
    monkeypatch.setenv("PATH", "")


def test_segmenter_masks_on_the_simulated_board_match_the_host(
        tmp_path, frames, edgefuse_segmenter, edgefuse_frames):
    build = _aipp_build(tmp_path, red_mask_model(), {"task": "segment", "classes": ["red"]},
                        "segmenter")
    board, host = edgefuse_segmenter(build), edgefuse_segmenter(build, backend="cpu")
    assert board.session.backend == "sim" and board.plan.aipp
    for image in edgefuse_frames(frames):
        board_mask, host_mask = board(image), host(image)
        assert board_mask.pixel_counts()[1] > 100  # the red disc is found
        assert_masks_match(board_mask, host_mask, min_mean_iou=0.98)


def colour_detector() -> onnx.ModelProto:
    """A YOLOv8-layout detector ([1, 6, 8]) whose boxes move with the picture: yolov8_output's
    first 8 anchors (two confident boxes, the 0.8 one suppressed by the 0.9 one), each box's cx
    shifted by 60 x (mean R - mean B) and cy by 30 x mean G of the RGB input in 0..1. A channel
    swap, a wrong scale or a frame the sim mangles moves every box."""
    weights = np.zeros((3, 48), np.float32)  # [channel, row * 8 + anchor]
    weights[0, 0:3], weights[2, 0:3], weights[1, 8:11] = 60.0, -60.0, 30.0
    graph = oh.make_graph(
        [oh.make_node("ReduceMean", ["images", "axes"], ["means"], keepdims=0),
         oh.make_node("MatMul", ["means", "weights"], ["flat"]),
         oh.make_node("Reshape", ["flat", "shape"], ["moved"]),
         oh.make_node("Add", ["base", "moved"], ["output0"])],
        "colour_detector",
        [oh.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [oh.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 8])],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
         numpy_helper.from_array(weights, "weights"),
         numpy_helper.from_array(np.array([1, 6, 8], np.int64), "shape"),
         numpy_helper.from_array(yolov8_output(anchors=8), "base")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                         ir_version=IR_VERSION)


def test_detector_boxes_on_the_simulated_board_match_the_host(
        tmp_path, frames, edgefuse_detector, edgefuse_frames):
    build = _aipp_build(tmp_path, colour_detector(),
                        {"task": "detect", "classes": ["circle", "square"],
                         "postprocess": {"layout": "yolov8"}}, "detector")
    board, host = edgefuse_detector(build), edgefuse_detector(build, backend="cpu")
    assert board.session.backend == "sim" and board.plan.aipp
    centres = set()
    for image in edgefuse_frames(frames):
        found = board(image)
        assert len(found) == 2
        assert_detections_match(found, host(image), iou=0.95,
                                class_names=board.class_names)
        centres.add(round(float(found.boxes[0, 0]), 1))
    assert len(centres) == 3  # the boxes follow the pictures


def test_the_segment_app_runs_on_the_simulated_board(tmp_path, frames, capsys):
    build = _aipp_build(tmp_path, red_mask_model(), {"task": "segment", "classes": ["red"]},
                        "segmenter")
    records = {}
    for backend in ("sim", "cpu"):
        log = tmp_path / f"{backend}.jsonl"
        code = main(["segment", "--model", str(build), "--source", str(frames), "--backend",
                     backend, "--threads", "1", "--stats-every", "0", "--jsonl", str(log)])
        assert code == 0
        assert f"on {backend}" in capsys.readouterr().err
        records[backend] = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records["sim"]) == 3
    for board, host in zip(records["sim"], records["cpu"], strict=True):
        red_board, red_host = board["pixels"]["red"], host["pixels"]["red"]
        assert abs(red_board - red_host) <= 0.02 * red_host  # FP16 moves only edge pixels
