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
from tests.vision.models import channel_logits_model, constant_model, write_clip

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


@pytest.mark.ort
def test_two_streams_batch_through_one_segmenter_and_each_gets_its_own_class_map(tmp_path,
                                                                                capsys):
    """Image folders of a red and a blue scene, one dynamic-batch model whose class is each
    pixel's strongest RGB channel, batches of both streams: a swapped row shows the other's."""
    model = channel_logits_model()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(model, tmp_path / "channels.onnx")
    for name, bgr in (("red", (0, 0, 255)), ("blue", (255, 0, 0))):
        (tmp_path / name).mkdir()
        for index in range(6):
            cv2.imwrite(str(tmp_path / name / f"{index}.png"), np.full((32, 32, 3), bgr, np.uint8))
    config = tmp_path / "cams.yaml"
    config.write_text(f"sources:\n  - {{name: red, source: {tmp_path / 'red'}}}\n"
                      f"  - {{name: blue, source: {tmp_path / 'blue'}}}\n"
                      "class_names: [r, g, b]\n")
    (tmp_path / "out").mkdir()
    code = main(["segment", "--config", str(config), "--model", str(tmp_path / "channels.onnx"),
                 "--jsonl", str(tmp_path / "out" / "{name}.jsonl"), "--batch-wait-ms", "60000",
                 *QUIET])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "batches run: 6 of size 2" in captured.out
    for name, cls in (("red", "r"), ("blue", "b")):
        records = [json.loads(line) for line in
                   (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines()]
        assert len(records) == 6 and {r["stream"] for r in records} == {name}
        assert all(r["pixels"] == {cls: 32 * 32} for r in records), records[0]


@pytest.mark.ort
def test_batch_1_on_the_command_line_runs_every_frame_alone(tmp_path, capsys):
    model = channel_logits_model()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(model, tmp_path / "channels.onnx")
    write_clip(tmp_path / "a.mp4", frames=3)
    code = main(["segment", "--model", str(tmp_path / "channels.onnx"), "--source",
                 str(tmp_path / "a.mp4"), "--source", str(tmp_path / "a.mp4"), "--batch", "1",
                 "--batch-wait-ms", "60000", *QUIET])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "batch up to 1" in captured.err and "batches run: 6 of size 1" in captured.out
