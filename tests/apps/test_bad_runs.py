"""A detect/segment run that cannot succeed fails before it opens a sink: exit 2, a diagnostic,
no traceback, and no output file created, emptied or replaced.

Each case below once exited 3 with a traceback, or 0 with an empty or clobbered file.
Permission cases run the CLI in a child process without root's override of file modes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgefuse.apps.config import SegmentationConfig, from_mapping
from edgefuse.cli.main import main
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import AppInfo, embed
from edgefuse.vision.detect.detector import Detector
from tests.needs import optional, without_dac_override
from tests.vision.models import constant_model, red_mask_model, write_clip, yolov8_output

pytestmark = pytest.mark.ort

cv2 = optional("cv2")
ROOT = Path(__file__).resolve().parents[2]
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]
OLD = "an earlier run's records\n"


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    info = AppInfo.from_dict({"task": "detect", "classes": ["circle", "square"],
                              "postprocess": {"layout": "yolov8"}})
    onnx.save(embed(constant_model(yolov8_output()), info), tmp_path / "det.onnx")
    onnx.save(red_mask_model(), tmp_path / "mask.onnx")
    whole = (tmp_path / "det.onnx").read_bytes()
    (tmp_path / "truncated.onnx").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "text.onnx").write_text("not a model\n")
    write_clip(tmp_path / "clip.mp4", frames=3)
    (tmp_path / "broken").mkdir()
    for name in ("a.jpg", "b.png"):
        (tmp_path / "broken" / name).write_bytes(b"\xff\xd8 cut short")
    (tmp_path / "old.jsonl").write_text(OLD)
    return tmp_path


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


CASES = [
    ("detect-truncated-model", ["detect", "--model", "truncated.onnx", "--source", "clip.mp4",
                                "--jsonl", "old.jsonl"], r"error\[truncated-model\]"),
    ("segment-text-model", ["segment", "--model", "text.onnx", "--source", "clip.mp4",
                            "--jsonl", "old.jsonl"], r"error\[not-onnx\]: 'text.onnx' is not"),
    ("segment-bogus-palette", ["segment", "--model", "mask.onnx", "--source", "clip.mp4",
                               "--palette", "bogus", "--jsonl", "old.jsonl", "--save", "o.mp4"],
     r"error\[bad-palette\]: 'palette': unknown palette 'bogus'"),
    ("segment-bogus-palette-without-drawing", ["segment", "--model", "mask.onnx", "--source",
                                               "clip.mp4", "--palette", "bogus", "--jsonl",
                                               "old.jsonl"], r"error\[bad-palette\]"),
    ("no-image-decodes", ["detect", "--model", "det.onnx", "--source", "broken", "--jsonl",
                          "new.jsonl"],
     r"error\[bad-source\]: none of the 2 images of 'broken' decodes"),
    ("no-globbed-image-decodes", ["detect", "--model", "det.onnx", "--source", "broken/*",
                                  "--jsonl", "old.jsonl"], r"none of the 2 images"),
    ("one-image-that-does-not-decode", ["detect", "--model", "det.onnx", "--source",
                                        "broken/a.jpg", "--jsonl", "new.jsonl"],
     r"error\[bad-source\]: cannot decode the image 'broken/a.jpg'"),
]


@pytest.mark.parametrize(("argv", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_run_that_cannot_succeed_writes_nothing(work, capsys, argv, match):
    before = _files(work)
    code = main([*argv, *QUIET])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("error[") == 1, err
    assert re.search(match, err), err
    assert _files(work) == before
    assert [p.name for p in work.iterdir() if p.name.startswith(".")] == []


def test_a_decoder_refusing_the_layout_fails_before_the_sinks_open(work, capsys, monkeypatch):
    """A decoder that checks the output layout raises at the rehearsal frame, not mid-stream."""
    def refuse(self, outputs, geometry):
        raise InputError("output0 [1, 64, 4] has no class scores", reference=Ref.BAD_LAYOUT)

    monkeypatch.setattr(Detector, "postprocess", refuse)
    before = _files(work)
    code = main(["detect", "--model", "det.onnx", "--source", "clip.mp4", "--jsonl", "old.jsonl",
                 "--save", "new.mp4", *QUIET])
    err = capsys.readouterr().err
    assert code == 2 and "error[bad-layout]" in err and "Traceback" not in err, err
    assert _files(work) == before


def test_a_folder_with_one_good_image_still_runs_and_counts_the_others(work, capsys):
    cv2.imwrite(str(work / "broken" / "c.jpg"), np.full((24, 32, 3), 90, np.uint8))
    code = main(["detect", "--model", "det.onnx", "--source", "broken", "--jsonl", "new.jsonl",
                 *QUIET])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "unreadable 2" in captured.out + captured.err
    assert [line.count('"name": "c.jpg"') for line in
            (work / "new.jsonl").read_text().splitlines()] == [1]


@pytest.mark.unit
@pytest.mark.parametrize("timeout", [0, 0.0001, float("nan"), float("inf")])
def test_a_stream_timeout_that_means_wait_forever_is_refused(timeout):
    with pytest.raises(InputError, match=r"'reconnect.timeout_s' must be a finite number of "
                                         r"seconds of at least 0.001") as caught:
        from_mapping(SegmentationConfig, {"reconnect": {"timeout_s": timeout}}, "c.yaml")
    assert caught.value.reference == "bad-config" and "hang the app forever" in caught.value.hint


def test_a_config_with_a_zero_stream_timeout_exits_2_before_connecting(work, capsys):
    (work / "c.yaml").write_text("source: rtsp://127.0.0.1:9/never\nreconnect: {timeout_s: 0}\n")
    assert main(["detect", "--config", "c.yaml", "--model", "det.onnx", *QUIET]) == 2
    err = capsys.readouterr().err
    assert "error[bad-config]: 'reconnect.timeout_s'" in err and "c.yaml" in err


# ---- sinks into a folder the user may not write ---------------------------------------------


@pytest.mark.parametrize("sink", [["--save", "ro/out.mp4"], ["--save", "ro/annotated"],
                                  ["--jsonl", "ro/out.jsonl"], ["--save", "ro"]],
                         ids=["video", "image-folder", "jsonl", "existing-folder"])
def test_a_sink_in_a_read_only_folder_is_a_user_error(tmp_path, sink):
    onnx.save(red_mask_model(), tmp_path / "mask.onnx")
    write_clip(tmp_path / "clip.mp4", frames=2)
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    done = subprocess.run(
        [*without_dac_override(), sys.executable, "-m", "edgefuse", "segment", "--model",
         "mask.onnx", "--source", "clip.mp4", *sink, *QUIET],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert "error[cannot-write]: cannot write in 'ro" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "frames in" not in done.stdout + done.stderr  # refused before the first frame
    assert list((tmp_path / "ro").iterdir()) == []
