"""`edgefuse segment` on the outputs models from other exporters have: instances (YOLOv8-seg),
sigmoid maps, NHWC scores; and its bad-input errors, raised before the first frame (exit 2, what
was found, what to set, no output file)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import onnx
import pytest

from edgefuse.cli.main import main
from tests.needs import optional
from tests.vision.models import constant_model, write_clip

cv2 = optional("cv2")
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]


@pytest.fixture
def clip(tmp_path):
    write_clip(tmp_path / "clip.mp4", frames=4)
    return tmp_path / "clip.mp4"


@pytest.mark.ort
@pytest.mark.parametrize(("output", "args", "message", "hint"), [
    (np.zeros((1, 3, 32, 32)), ["--class-names", "a,b"],
     r"has 3 classes \(axis 1 of its output output0: float32\[1,3,32,32\]\), but class_names "
     r"lists 2: a, b", "set class_names to the model's 3 class names"),
    (np.zeros((1, 32, 32)), ["--layout", "seg_logits"],
     r"output output0: float32\[1,32,32\] has rank 3; layout seg_logits reads \[1, C, h, w\]",
     "set layout: to the one that matches"),
    (np.zeros((1, 2, 32, 32, 1)), [], "cannot tell how to decode the outputs",
     "layout"),
    (np.zeros((1, 32, 32, 1)), ["--activation", "softmax"],
     "a one-channel output cannot be a softmax", "set activation: sigmoid"),
    (np.zeros((1, 32, 16)), [], r"is not a segmentation model: its output .* reads as a "
                                r"detection model", "set layout: to how its outputs read"),
])
def test_bad_segmentation_outputs_exit_2_before_any_frame(tmp_path, clip, capsys, output, args,
                                                          message, hint):
    model = tmp_path / "model.onnx"
    onnx.save(constant_model(output), model)
    out, log = tmp_path / "out.mp4", tmp_path / "out.jsonl"
    code = main(["segment", "--model", str(model), "--source", str(clip), "--save", str(out),
                 "--jsonl", str(log), *args, *QUIET])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error[" in err and "Traceback" not in err
    assert re.search(message, err), err
    assert hint in err, err
    assert not out.exists() and not log.exists()


@pytest.mark.torch
def test_instances_end_to_end_into_jsonl_and_video(tmp_path, clip, capsys):
    from tests.vision.segment.heads import YoloV8SegLike, export  # noqa: PLC0415 - needs torch

    model = tmp_path / "seg.onnx"
    export(YoloV8SegLike(3), model, outputs=("output0", "output1"))
    out, log = tmp_path / "out.mp4", tmp_path / "out.jsonl"
    old = os.umask(0o022)
    try:
        code = main(["segment", "--model", str(model), "--source", str(clip), "--save",
                     str(out), "--jsonl", str(log), "--class-names", "a,b,c", "--conf", "0.5",
                     "--mask-format", "rle", *QUIET])
    finally:
        os.umask(old)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "yolov8_seg on cpu" in captured.err
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 4 and all(r["instances"] for r in records)
    first = records[0]
    assert sum(first["counts"].values()) == len(first["instances"])
    assert set(first["counts"]) <= {"a", "b", "c"}
    assert {tuple(i["rle"]["size"]) for i in first["instances"]} == {(48, 64)}
    assert all(sum(i["rle"]["counts"][1::2]) == i["area"] for i in first["instances"])
    assert {p.stat().st_mode & 0o777 for p in (out, log)} == {0o644}


@pytest.mark.torch
def test_a_sigmoid_map_counts_its_true_foreground(tmp_path, clip, capsys):
    from tests.vision.segment.heads import SalientLike, export  # noqa: PLC0415 - needs torch

    model = tmp_path / "salient.onnx"
    export(SalientLike(), model, size=32, seed=1, scale=3.0, bias=0.05)
    log = tmp_path / "out.jsonl"
    assert main(["segment", "--model", str(model), "--source", str(clip), "--jsonl", str(log),
                 *QUIET]) == 0
    assert "seg_sigmoid on cpu" in capsys.readouterr().err
    forced = tmp_path / "forced.jsonl"
    assert main(["segment", "--model", str(model), "--source", str(clip), "--jsonl",
                 str(forced), "--activation", "none", *QUIET]) == 0
    read = [json.loads(line)["foreground_pixels"] for line in log.read_text().splitlines()]
    as_logits = [json.loads(line)["foreground_pixels"] for line in forced.read_text().splitlines()]
    assert as_logits == [48 * 64] * 4  # probabilities read as logits: everything is foreground
    assert all(0 < r < 48 * 64 for r in read)
