"""No verb writes over what it reads: every output compared with every input and every other output.

Each case is a command that used to exit 0 and destroy a file the user gave it (the source video,
the image folder, the model, the recording, the bundle, the spec's own folder). Now it exits 2
with ``error[output-is-input]`` (or ``error[bad-output-path]`` for two outputs on one file) and
every file of the work folder is byte for byte what it was, with nothing added.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgefuse._files import check_outputs_spare_inputs
from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, embed
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.bundle.models import pixel_head
from tests.model_builders import conv_net
from tests.needs import optional
from tests.vision.models import constant_model, write_clip, yolov8_output

pytestmark = pytest.mark.ort

cv2 = optional("cv2")
ROOT = Path(__file__).resolve().parents[2]
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]
SPEC = """\
apiVersion: edgefuse/v1
bundle: {name: lossless, version: 1.0.0}
target: {soc: Ascend310B4}
models:
  - name: head
    source: head.onnx
python: {version: "3.10", wheels: download}
"""


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """The files a user hands the verbs, in the current folder (commands use relative paths)."""
    monkeypatch.chdir(tmp_path)
    info = AppInfo.from_dict({"task": "detect", "classes": ["circle", "square"],
                              "postprocess": {"layout": "yolov8"}})
    onnx.save(embed(constant_model(yolov8_output()), info), tmp_path / "det.onnx")
    write_clip(tmp_path / "clip.mp4", frames=3)
    (tmp_path / "frames").mkdir()
    for name in ("a.jpg", "b.jpg"):
        cv2.imwrite(str(tmp_path / "frames" / name), np.full((24, 32, 3), 90, np.uint8))
    (tmp_path / "config.yaml").write_text("conf: 0.3\n")
    os.symlink("clip.mp4", tmp_path / "clip-link.mp4")
    os.link(tmp_path / "det.onnx", tmp_path / "det-hardlink.onnx")
    onnx.save(conv_net(), tmp_path / "model.onnx")
    np.savez(tmp_path / "inputs.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    assert main(["run", "model.onnx", "--backend", "cpu", "--record", "rec.npz"]) == 0
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "MANIFEST.json").write_text("{}\n")
    with tarfile.open(tmp_path / "bundle.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "bundle", "bundle")
    (tmp_path / "proj").mkdir()
    onnx.save(pixel_head(), tmp_path / "proj" / "head.onnx")
    (tmp_path / "proj" / "spec.yaml").write_text(SPEC)
    (tmp_path / "out" / "cache").mkdir(parents=True)  # an earlier build's output, with a cache
    (tmp_path / "out" / "cache" / "entry").write_text("cached stage")
    return tmp_path


DETECT = ["detect", "--model", "det.onnx", "--source", "clip.mp4"]
OPEN = "error\\[output-is-input\\]"
CASES = [
    ("save-over-the-video", [*DETECT, "--save", "clip.mp4"],
     rf"{OPEN}: the --save output 'clip.mp4' is the source 'clip.mp4'"),
    ("save-over-the-video-through-a-link", [*DETECT, "--save", "clip-link.mp4"],
     rf"{OPEN}: the --save output 'clip-link.mp4' is the source"),
    ("save-over-the-image-folder", ["detect", "--model", "det.onnx", "--source", "frames",
                                    "--save", "frames"], rf"{OPEN}: .*'frames' is the source"),
    ("save-over-the-globbed-images", ["detect", "--model", "det.onnx", "--source",
                                      "frames/*.jpg", "--save", "frames"],
     rf"{OPEN}: the --save output 'frames' holds the source 'frames/a.jpg'"),
    ("save-inside-the-image-folder", ["detect", "--model", "det.onnx", "--source", "frames",
                                      "--save", "frames/annotated"],
     rf"{OPEN}: .*'frames/annotated' lies inside the source 'frames'"),
    ("jsonl-over-the-model", [*DETECT, "--jsonl", "det.onnx"],
     rf"{OPEN}: the --jsonl output 'det.onnx' is the model"),
    ("jsonl-over-a-hard-link-of-the-model", [*DETECT, "--jsonl", "det-hardlink.onnx"],
     rf"{OPEN}: the --jsonl output 'det-hardlink.onnx' is the model 'det.onnx'"),
    ("jsonl-over-the-video", [*DETECT, "--jsonl", "clip.mp4"],
     rf"{OPEN}: the --jsonl output 'clip.mp4' is the source"),
    ("jsonl-over-the-config", [*DETECT, "--config", "config.yaml", "--jsonl", "config.yaml"],
     rf"{OPEN}: the --jsonl output 'config.yaml' is the config"),
    ("save-and-jsonl-on-one-file", [*DETECT, "--save", "out.mp4", "--jsonl", "out.mp4"],
     r"error\[bad-output-path\]: the --jsonl output and the --save output are the same file"),
    ("segment-save-over-the-video", ["segment", "--model", "det.onnx", "--source", "clip.mp4",
                                     "--save", "clip.mp4"], rf"{OPEN}: .*is the source"),
    ("run-record-over-the-model", ["run", "det.onnx", "--backend", "cpu", "--record",
                                   "det.onnx"], rf"{OPEN}: the --record output 'det.onnx' is the "
                                                "model"),
    ("run-record-over-the-inputs", ["run", "model.onnx", "--backend", "cpu", "--inputs",
                                    "inputs.npz", "--record", "inputs.npz"],
     rf"{OPEN}: the --record output 'inputs.npz' is the --inputs"),
    ("run-save-over-the-frames", ["run", "det.onnx", "--backend", "cpu", "--frames", "frames",
                                  "--save", "frames/out.npz"],
     rf"{OPEN}: the --save output 'frames/out.npz' lies inside the --frames"),
    ("verify-json-over-the-recording", ["verify", "--against", "rec.npz", "model.onnx",
                                        "--backend", "cpu", "--json", "rec.npz"],
     rf"{OPEN}: the --json report 'rec.npz' is the recording"),
    ("verify-json-over-the-model", ["verify", "--against", "rec.npz", "model.onnx", "--backend",
                                    "cpu", "--json", "model.onnx"],
     rf"{OPEN}: the --json report 'model.onnx' is the model"),
    ("verify-two-models-json-over-the-candidate", ["verify", "model.onnx", "det.onnx",
                                                   "--json", "det.onnx"],
     rf"{OPEN}: the report 'det.onnx' is the candidate"),
    ("bundle-verify-json-over-the-archive", ["bundle", "verify", "bundle.tar.gz", "--json",
                                             "bundle.tar.gz"],
     rf"{OPEN}: the --json report 'bundle.tar.gz' is the bundle"),
    ("bundle-verify-json-into-the-bundle", ["bundle", "verify", "bundle", "--json",
                                            "bundle/MANIFEST.json"],
     rf"{OPEN}: the --json report 'bundle/MANIFEST.json' lies inside the bundle 'bundle'"),
    ("build-force-over-the-spec-folder", ["build", "proj/spec.yaml", "-o", "proj", "--force",
                                          "--cache", "cache"],
     rf"{OPEN}: the output folder 'proj' holds the build spec 'proj/spec.yaml'"),
    ("build-force-over-the-cache", ["build", "proj/spec.yaml", "-o", "out", "--force",
                                    "--cache", "out/cache"],
     rf"{OPEN}: the output folder 'out' holds the cache folder 'out/cache'"),
    ("optimize-over-its-input", ["optimize", "model.onnx", "-o", "model.onnx"],
     rf"{OPEN}: the model 'model.onnx' is the input model"),
    ("optimize-report-over-its-input", ["optimize", "model.onnx", "-o", "o.onnx", "--report",
                                        "model.onnx"],
     rf"{OPEN}: the report 'model.onnx' is the input model"),
    ("quantize-over-its-input", ["quantize", "model.onnx", "-o", "model.onnx", "--fp16"],
     rf"{OPEN}: the model 'model.onnx' is the input model"),
    ("quantize-report-over-the-calibration", ["quantize", "model.onnx", "-o", "q.onnx",
                                              "--fp16", "--inputs", "inputs.npz", "--report",
                                              "inputs.npz"],
     rf"{OPEN}: the report 'inputs.npz' is the calibration inputs"),
    ("convert-over-its-source", ["convert", "model.onnx", "-o", "model.onnx"],
     rf"{OPEN}: the output 'model.onnx' is the source"),
    ("compile-build-dir-holding-the-model", ["compile", "model.onnx", "--soc", "Ascend310B4",
                                             "-o", ".", "--force"],
     rf"{OPEN}: the BUILD_DIR '.' holds the model 'model.onnx'"),
    ("bench-json-over-the-model", ["bench", "model.onnx", "--backend", "cpu", "--iterations",
                                   "1", "--json", "model.onnx"],
     rf"{OPEN}: the --json report 'model.onnx' is the model"),
    ("demo-workdir-holding-the-sample-clip", ["demo", "--workdir", str(SAMPLE_CLIP.parent)],
     rf"{OPEN}: the --workdir '.*data' holds the sample clip"),
]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("argv", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_output_over_an_input_is_refused_and_nothing_changes(work, capsys, monkeypatch, argv,
                                                                 match):
    monkeypatch.setenv("PATH", os.defpath)  # no atc here, whatever the machine has
    before = _snapshot(work)
    clip_before = SAMPLE_CLIP.read_bytes()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("error[") == 1, err
    assert re.search(match, err), err
    assert "hint: give the" in err
    assert _snapshot(work) == before
    assert SAMPLE_CLIP.read_bytes() == clip_before


@pytest.mark.parametrize(("folder", "spec", "force", "match"), [
    ("proj", "spec.yaml", ["--force"], r"the output folder '.*proj' holds the build spec "
                                       r"'spec.yaml'"),
    ("frames", "../proj/spec.yaml", ["--force"], r"the build would replace '.*frames', which "
                                                 r"holds the current folder"),
    ("empty", "../proj/spec.yaml", [], r"the build would replace '.*empty', which holds the "
                                       r"current folder"),
])
def test_build_never_replaces_the_current_folder(work, capsys, monkeypatch, folder, spec, force,
                                                 match):
    (work / "empty").mkdir()
    before = _snapshot(work)
    monkeypatch.chdir(work / folder)
    code = main(["build", spec, "-o", ".", *force, "--cache", str(work / "cache")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error[output-is-input]" in err and re.search(match, err), err
    assert _snapshot(work) == before


def test_python_dash_m_apps_detection_refuses_to_save_over_its_source(tmp_path):
    write_clip(tmp_path / "clip.mp4", frames=3)
    before = (tmp_path / "clip.mp4").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "apps.detection", "--model", "yolov8n:tiny", "--source",
         str(tmp_path / "clip.mp4"), "--save", str(tmp_path / "clip.mp4")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "error[output-is-input]" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "clip.mp4").read_bytes() == before


def test_separate_outputs_next_to_the_inputs_are_allowed(work, capsys):
    code = main([*DETECT, "--save", "out.mp4", "--jsonl", "out.jsonl", *QUIET])
    assert code == 0, capsys.readouterr().err
    assert (work / "out.mp4").stat().st_size > 0 and (work / "out.jsonl").read_text()


# ---- the helper itself --------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(("output", "inputs", "message"), [
    ("a.txt", {"input": "a.txt"}, r"the out 'a\.txt' is the input 'a\.txt'"),
    ("dir", {"input": "dir/a.txt"}, r"the out 'dir' holds the input 'dir/a\.txt'"),
    ("dir/new.txt", {"input": "dir"}, r"the out 'dir/new\.txt' lies inside the input 'dir'"),
    ("dir/../a.txt", {"input": "a.txt"}, r"is the input"),
    ("link.txt", {"input": "a.txt"}, r"is the input"),
    ("hard.txt", {"input": "a.txt"}, r"is the input"),
    ("dir", {"several": ["b.txt", "dir/a.txt"]}, r"holds the several 'dir/a\.txt'"),
    ("dir", {"glob": "dir/*.txt"}, r"holds the glob 'dir/a\.txt'"),
])
def test_the_helper_finds_every_kind_of_overlap(tmp_path, monkeypatch, output, inputs, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.txt").write_text("x")
    (tmp_path / "a.txt").write_text("y")
    (tmp_path / "b.txt").write_text("z")
    os.symlink("a.txt", tmp_path / "link.txt")
    os.link(tmp_path / "a.txt", tmp_path / "hard.txt")
    with pytest.raises(InputError, match=message) as caught:
        check_outputs_spare_inputs({"out": output}, inputs)
    assert caught.value.reference == "output-is-input"


@pytest.mark.unit
def test_the_helper_leaves_out_what_is_not_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("y")
    check_outputs_spare_inputs(  # a catalogue name, a camera, a URL, a model in memory
        {"folder": "."},
        {"model": "yolov8n:tiny", "source": "0", "url": "rtsp://cam/1", "proto": conv_net(),
         "nothing": None})
    with pytest.raises(InputError, match=r"the second and the first are the same file"):
        check_outputs_spare_inputs({"first": "o.txt", "second": "./o.txt"})
