"""The pytest plugin as a user meets it: README's first host-side test, run by pytest in a project
of its own (the plugin loads from edgefuse's entry point, no conftest), passing on the build and
its goldens, failing with the kit's message when the goldens drift, and on another backend."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.acl.compile.compile import compile_model
from edgefuse.cli import main as cli_main
from edgefuse.reference.recording import load_recording, make_recording
from tests.model_builders import IR_VERSION, OPSET, save
from tests.needs import optional

pytestmark = pytest.mark.ort

ROOT = Path(__file__).resolve().parents[2]


def readme_test() -> str:
    """The Python block of README.md's "Host-side tests" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Host-side tests", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def detector_model():
    """A YOLOv8-layout detector ([1, 4 + 2 classes, 8 anchors]) with three confident boxes whose
    positions move a little with the image's mean: decisions far from every threshold."""
    base = np.zeros((1, 6, 8), np.float32)
    base[0, :4, :3] = [[8, 20, 26], [8, 12, 24], [6, 8, 10], [6, 10, 8]]  # cx, cy, w, h
    base[0, 4:, :] = 0.02
    base[0, 4, 0] = base[0, 5, 1] = base[0, 4, 2] = 0.9
    shift = np.zeros((1, 6, 8), np.float32)
    shift[0, :2, :3] = 1.0
    graph = oh.make_graph(
        [oh.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
         oh.make_node("Mul", ["m", "shift"], ["moved"]),
         oh.make_node("Add", ["base", "moved"], ["output0"])],
        "detector", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [oh.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 8])],
        [numpy_helper.from_array(base, "base"), numpy_helper.from_array(shift, "shift")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                         ir_version=IR_VERSION)


@pytest.fixture
def project(tmp_path, monkeypatch, capsys):
    """A user's project: build/, tests/frames/, tests/golden.npz (recorded on cpu) and README's
    test as tests/test_on_the_board.py."""
    cv2 = optional("cv2")
    monkeypatch.setenv("PATH", "")
    monkeypatch.chdir(tmp_path)
    compile_model(save(detector_model(), tmp_path / "detector.onnx"), "Ascend310B4", "build")
    frames = tmp_path / "tests" / "frames"
    frames.mkdir(parents=True)
    for index in range(2):
        cv2.imwrite(str(frames / f"{index}.png"), np.full((24, 40, 3), 60 * index, np.uint8))
    argv = ["run", "build/", "--backend", "cpu", "--frames", "tests/frames/", "--record",
            "tests/golden.npz"]
    assert cli_main.main(argv) == 0, capsys.readouterr()
    (tmp_path / "tests" / "test_on_the_board.py").write_text(readme_test(), encoding="utf-8")
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": ""}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(project), *args, "tests"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_the_readme_test_passes_on_sim_and_on_another_backend(project):
    from edgefuse.vision.detect.detector import Detector

    assert len([line for line in readme_test().splitlines() if line.strip()]) <= 10
    with Detector.open("build/", backends="sim") as board:  # the detections are not vacuous
        assert len(board(np.zeros((24, 40, 3), np.uint8))) == 3
    done = _pytest(project)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr
    done = _pytest(project, "--edgefuse-backend", "cpu")
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr


def test_drifted_goldens_fail_with_the_kits_message(project):
    golden = project / "tests" / "golden.npz"
    recording = load_recording(golden)
    drifted = [(sample.inputs, {"output0": sample.outputs["output0"] * 1.2})
               for sample in recording.samples]
    make_recording(drifted, recording.meta).save(golden)
    done = _pytest(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert re.search(r"AssertionError: sim outputs on 2 sample\(s\) recorded on cpu, build "
                     r"[0-9a-f]{12}, edgefuse \S+ differ \(cosine >= 0\.999 and max abs error <= "
                     r"0\.01 x max\|expected\|\):", done.stdout), done.stdout
    assert re.search(r"sample 0: output 'output0': max abs error [\d.]+ > [\d.]+; worst at "
                     r"\[0, \d, \d\]", done.stdout), done.stdout


def test_scenes_come_from_the_scene_generator(project):
    (project / "tests" / "test_scenes.py").write_text(
        "from edgefuse.vision.scenes.shapes import SceneGenerator\n"
        "def test_scenes(edgefuse_frames):\n"
        "    frames = edgefuse_frames('scenes', count=2, size=(48, 64), seed=3)\n"
        "    assert len(frames) == 2 and frames[0].shape == (48, 64, 3)\n"
        "    assert (frames[1] == SceneGenerator(seed=3, size=(48, 64)).scene(1).image).all()\n",
        encoding="utf-8")
    done = _pytest(project, "-k", "test_scenes")
    assert "1 passed" in done.stdout, done.stdout + done.stderr


def test_the_backend_option_reaches_every_fixture(project, monkeypatch):
    """--edgefuse-backend is the backend of sessions, detectors and segmenters opened without
    one (default sim); a backend named in the call wins."""
    (project / "tests" / "test_backend.py").write_text(
        "import os\n"
        "def test_backend(edgefuse_session, edgefuse_detector):\n"
        "    want = os.environ['WANT_BACKEND']\n"
        "    assert edgefuse_session('build/').backend == want\n"
        "    assert edgefuse_detector('build/').session.backend == want\n"
        "    assert edgefuse_session('build/', backend='cpu').backend == 'cpu'\n",
        encoding="utf-8")
    for option, want in ((("--edgefuse-backend", "cpu"), "cpu"), ((), "sim")):
        monkeypatch.setenv("WANT_BACKEND", want)
        done = _pytest(project, *option, "-k", "test_backend")
        assert "1 passed" in done.stdout, (option, done.stdout + done.stderr)
