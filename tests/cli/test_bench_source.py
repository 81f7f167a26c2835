"""``edgefuse bench --source``: the whole frame path on real frames (issue 30 §5), and the clear
refusals of a source that cannot be read (exit 2, no traceback)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model
from edgefuse.cli import main as cli_main
from edgefuse.testing.mjpeg import MjpegServer
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.acl.models import hide_atc
from tests.fallback.test_dvpp_emulation import h264_clip
from tests.needs import optional
from tests.vision.models import brightness_box_model, constant_model, red_mask_model

pytestmark = pytest.mark.ort

optional("cv2")
CLIP_FRAMES = 150  # the demo clip's, counted by PyAV below


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "box.onnx"
    onnx.save(brightness_box_model(), path)
    return path


def _bench(capsys, *args):
    code = cli_main.main(["bench", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_demo_clip_through_the_whole_frame_path(detector, tmp_path, capsys):
    av = optional("av")
    with av.open(str(SAMPLE_CLIP)) as container:
        assert sum(1 for _ in container.decode(video=0)) == CLIP_FRAMES
    report = tmp_path / "frames.json"
    code, out, err = _bench(capsys, detector, "--backend", "cpu", "--source", SAMPLE_CLIP,
                            "--iterations", 20, "--warmup", 3, "--json", report)
    assert code == 0, err
    assert "decode cpu, 20 frames timed, input written in place" in out
    assert "fps (stages in series)" in out and "cores busy" in out
    data = json.loads(report.read_text())
    assert data["frames"] == 20 and data["decode"] == "cpu" and data["task"] == "detect"
    assert data["frame_size"] == [320, 240] and data["in_place"] is True
    assert set(data["stages"]) == {"decode", "preprocess", "infer", "postprocess"}
    assert data["cpu_ms_per_frame"] > 0 and data["wall_ms_per_frame"] > 0
    assert data["fps"] == pytest.approx(1000 / data["wall_ms_per_frame"])
    # More frames asked than the file has: every frame after the warm-up, no more.
    code, _, err = _bench(capsys, detector, "--backend", "cpu", "--source", SAMPLE_CLIP,
                          "--iterations", 1000, "--warmup", 10, "--json", report)
    assert code == 0, err
    assert json.loads(report.read_text())["frames"] == CLIP_FRAMES - 10


def test_decode_dvpp_on_sim_times_the_emulated_media_units(detector, tmp_path, monkeypatch,
                                                           capsys):
    hide_atc(monkeypatch)
    build = tmp_path / "yuv"
    compile_model(detector, "Ascend310B4", build,
                  aipp=AippSpec(input_format="YUV420SP", source_size=(32, 32),
                                scale=(1 / 255,) * 3, csc="bt601_narrow"))
    clip = h264_clip(SAMPLE_CLIP, tmp_path / "clip.mp4", frames=12)
    report = tmp_path / "frames.json"
    code, out, err = _bench(capsys, build, "--backend", "sim", "--source", clip, "--decode",
                            "dvpp", "--iterations", 8, "--warmup", 2, "--json", report)
    assert code == 0, err
    data = json.loads(report.read_text())
    assert (data["backend"], data["decode"], data["frames"]) == ("sim", "dvpp", 8)
    assert data["in_place"] is True  # the emulated VPC wrote into the session's input buffers
    # auto is DVPP only on the board (acl with its media API): here the CPU decodes.
    code, _, err = _bench(capsys, build, "--backend", "sim", "--source", clip, "--iterations",
                          4, "--warmup", 0, "--json", report)
    assert code == 0, err
    assert json.loads(report.read_text())["decode"] == "cpu"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_source_that_cannot_be_read_is_refused_clearly(detector, tmp_path, capsys):
    empty_folder = tmp_path / "no_images"
    empty_folder.mkdir()
    truncated = tmp_path / "cut.mp4"
    truncated.write_bytes(SAMPLE_CLIP.read_bytes()[:2000])
    cases = [
        (["--source", tmp_path / "missing.mp4"], r"error\[bad-source\]: the source .* does not "
                                                 r"exist"),
        (["--source", f"http://127.0.0.1:{_closed_port()}/stream.mjpg"],
         r"error\[bad-source\]: cannot open the stream"),
        (["--source", empty_folder], r"error\[bad-source\]: .* holds no images"),
        (["--source", truncated], r"error\[bad-source\]: cannot open the video"),
        (["--source", SAMPLE_CLIP, "--warmup", 500],
         r"error\[bad-source\]: .* gave only 150 frame\(s\), all spent on the 500 warm-up"),
        (["--source", SAMPLE_CLIP, "--decode", "dvpp"],
         r"error\[bad-config\]: decode: dvpp needs the board's media units"),
        (["--decode", "dvpp"], r"error\[bad-usage\]: --decode is for the frame path"),
        (["--source", SAMPLE_CLIP, "--batch", 2],
         r"error\[bad-usage\]: --batch is for timing the model on tensors"),
        # a report that cannot be written fails before the timing, not after it
        (["--source", SAMPLE_CLIP, "--json", tmp_path / "missing" / "r.json"],
         r"error\[bad-output-path\]: output directory .*missing' does not exist"),
        (["--json", tmp_path / "missing" / "r.json"],
         r"error\[bad-output-path\]: output directory .*missing' does not exist"),
    ]
    for args, message in cases:
        code, out, err = _bench(capsys, detector, "--backend", "cpu", *args)
        assert code == 2, (args, err)
        assert "Traceback" not in err and out == ""
        assert re.search(message, err), (args, err)


def test_a_segmenter_times_its_frame_path(tmp_path, capsys):
    """A model whose outputs read as masks runs as the segmentation app does: the detector's
    refusal (wrong-model-kind) moves on to the segmenter, it does not end the bench."""
    model = tmp_path / "mask.onnx"
    onnx.save(red_mask_model(), model)
    report = tmp_path / "frames.json"
    code, out, err = _bench(capsys, model, "--backend", "cpu", "--source", SAMPLE_CLIP,
                            "--iterations", 5, "--warmup", 1, "--json", report)
    assert code == 0, err
    assert "(segment), source" in out
    assert json.loads(report.read_text())["task"] == "segment"


def test_a_model_no_app_reads_is_refused_naming_both_tasks(tmp_path, capsys):
    model = tmp_path / "logits.onnx"
    onnx.save(constant_model(np.zeros((1, 10), np.float32)), model)
    code, out, err = _bench(capsys, model, "--backend", "cpu", "--source", SAMPLE_CLIP)
    assert code == 2 and out == "" and "Traceback" not in err
    assert re.search(r"error\[wrong-model-kind\]: the frame path runs detectors and segmenters; "
                     r".*logits\.onnx is not a detection model", err), err
    assert "to time any model on tensors, leave out --source" in err


def test_inputs_help_says_images_and_videos_as_they_are_taken(detector, capsys):
    """bench --inputs takes a video (or a folder of images) like every verb that runs a model;
    its help said .npz only."""
    with pytest.raises(SystemExit):
        cli_main.main(["bench", "--help"])
    assert "a folder of images or a video" in " ".join(capsys.readouterr().out.split())
    code, out, err = _bench(capsys, detector, "--backend", "cpu", "--inputs", SAMPLE_CLIP,
                            "--iterations", 2, "--warmup", 0, "--no-onnxruntime")
    assert code == 0, err
    assert "edgefuse/cpu" in out


def test_a_live_stream_is_timed_with_a_note_on_its_pace(detector, tmp_path, capsys):
    """A camera sends frames at its own rate: the decode stage holds the wait for the next one,
    and the report says so (a file's does not)."""
    report = tmp_path / "frames.json"
    with MjpegServer(fps=100) as camera:
        code, out, err = _bench(capsys, detector, "--backend", "cpu", "--source", camera.url,
                                "--iterations", 3, "--warmup", 0, "--json", report)
    assert code == 0, err
    assert "note: a camera or stream sends frames at its own rate" in out
    assert json.loads(report.read_text())["paced"] is True
    code, out, err = _bench(capsys, detector, "--backend", "cpu", "--source", SAMPLE_CLIP,
                            "--iterations", 3, "--warmup", 0, "--json", report)
    assert code == 0, err
    assert "note:" not in out and json.loads(report.read_text())["paced"] is False


def test_a_folder_of_photos_is_timed_with_the_default_warmup(detector, tmp_path, capsys):
    """A handful of photos is timed, not all spent on the warm-up: by default at most half of a
    folder of images warms up (the tensor bench's 10 runs left nothing of 7 photos)."""
    photos = sorted((Path(__file__).parents[1] / "vision" / "photos").glob("*.jpg"))
    report = tmp_path / "frames.json"
    code, out, err = _bench(capsys, detector, "--backend", "cpu", "--source", photos[0].parent,
                            "--json", report)
    assert code == 0, err
    assert json.loads(report.read_text())["frames"] == len(photos) - len(photos) // 2
    code, out, err = _bench(capsys, detector, "--backend", "cpu", "--source", photos[0],
                            "--json", report)
    assert code == 0, err
    assert json.loads(report.read_text())["frames"] == 1
