"""``edgefuse build`` starts the bundle's app before it signs (``app_trial``).

The specs hold a two-class YOLOv8-layout detector built from an ONNX file (tests/bundle/models.py:
no PyTorch, seconds per build); the cache is shared by the module's builds. The refusals are the
app's own errors (the same command as the unit's ExecStart, in a subprocess), named by the spec
key they come from, and leave no output folder, archive or signature behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgefuse.bundle.app_trial import DEFAULT_FRAME_SIZE, frame_size, try_app
from edgefuse.bundle.spec import load_spec
from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.manifest import file_sha256
from tests.bundle.models import write_detection_spec

pytestmark = pytest.mark.ort


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("trial-cache")


def _build(spec: Path, out: Path, cache: Path, *extra: str) -> int:
    return main(["build", str(spec), "-o", str(out), "--cache", str(cache), *extra])


def _line_of(spec: Path, text: str) -> int:
    """1-based line of the first line of ``spec`` that starts (after spaces) with ``text``."""
    lines = spec.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(text))


def _leftovers(parent: Path) -> list[str]:
    """What a build left in OUT_DIR's parent besides the spec's own files."""
    return sorted(p.name for p in parent.iterdir()
                  if p.name not in ("spec.yaml", "models", "wheelhouse"))


def test_a_good_spec_builds_and_says_the_app_ran_on_sim_and_cpu(tmp_path, cache, capsys):
    spec = write_detection_spec(tmp_path)
    assert _build(spec, tmp_path / "out", cache) == 0
    said = capsys.readouterr().err
    assert ("app: `edgefuse detect --config app/config.yaml` ran 5 frames of a generated "
            "640x480 source on sim (") in said
    assert " s) and cpu (" in said
    log = json.loads((tmp_path / "out" / "build-log.json").read_text())
    assert [(run["backend"], run["frames"]) for run in log["app"]["runs"]] == [("sim", 5),
                                                                              ("cpu", 5)]
    assert log["app"]["frame_size"] == list(DEFAULT_FRAME_SIZE)
    bundle = tmp_path / "out" / "boxes-1.0.0"
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    files = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == files - {"MANIFEST.json"}  # the run wrote nothing there
    assert all(manifest["files"][name] == file_sha256(bundle / name) for name in files
               if name != "MANIFEST.json")


@pytest.mark.parametrize(("edit", "runs", "skipped"), [
    (("  backend: [acl, cpu]\n", "  backend: [acl]\n"), ["sim"],
     {"cpu": "not in the app's backend list"}),
    (("  soc: Ascend310B4\n", "  soc: Ascend310P3\n"), ["cpu"],
     {"sim": "edgefuse does not simulate Ascend310P3's board (its golden ran on cpu too)"}),
])
def test_the_app_runs_on_the_backends_the_host_can_give_it(tmp_path, cache, edit, runs,
                                                           skipped):
    spec = write_detection_spec(tmp_path)
    spec.write_text(spec.read_text(encoding="utf-8").replace(*edit), encoding="utf-8")
    assert _build(spec, tmp_path / "out", cache, "--no-progress") == 0
    log = json.loads((tmp_path / "out" / "build-log.json").read_text())
    assert [run["backend"] for run in log["app"]["runs"]] == runs
    assert log["app"]["skipped"] == skipped


def test_a_class_count_the_model_does_not_have_is_refused_and_nothing_is_written(
        tmp_path, cache, capsys):
    spec = write_detection_spec(tmp_path, classes="[a, b, c]")
    assert _build(spec, tmp_path / "out", cache, "--sign", str(_key(tmp_path))) == 2
    said = capsys.readouterr().err
    assert ("error[app-failed-before-signing]: models[0].classes: the outputs output0 "
            "float32[1,6,16] do not hold 3 classes") in said
    assert "as yolov8 it has 2 classes" in said
    assert f"3 names, classes of the model detector (models/boxes.onnx): " \
           f"[\"a\", \"b\", \"c\"] (spec.yaml:{_line_of(spec, 'classes:')}:5)" in said
    assert "failed on sim with 5 generated 640x480 frames" in said
    assert "it exited with status 2" in said
    assert "error[bad-layout]" in said  # the app's own error, in full
    assert _leftovers(tmp_path) == ["keys"]  # no OUT_DIR, no partial folder, no archive


def test_a_refused_rebuild_leaves_the_previous_output_as_it_was(tmp_path, cache):
    spec = write_detection_spec(tmp_path)
    out = tmp_path / "out"
    assert _build(spec, out, cache) == 0
    before = {p.relative_to(out).as_posix(): file_sha256(p) for p in out.rglob("*")
              if p.is_file()}
    write_detection_spec(tmp_path, classes="[a, b, c]")
    assert _build(spec, out, cache, "--force") == 2
    after = {p.relative_to(out).as_posix(): file_sha256(p) for p in out.rglob("*")
             if p.is_file()}
    assert after == before
    assert _leftovers(tmp_path) == ["out"]


@pytest.mark.parametrize(("config", "key", "said"), [
    ("{classes: [dog]}", "app.config.classes", "unknown class 'dog' in classes"),
    ("{lines: [{name: door, start: [0, 10], end: [5000, 10]}]}", "app.config.lines",
     "line 'door' has an end [5000.0, 10.0] outside the 3840x2160 frame"),
    ("{preprocess: {size: [64, 64]}}", "app.config.preprocess", "preprocess"),
])
def test_a_bad_app_config_value_is_refused_naming_its_key(tmp_path, cache, capsys, config, key,
                                                          said):
    spec = write_detection_spec(tmp_path, config=config)
    assert _build(spec, tmp_path / "out", cache) == 2
    text = capsys.readouterr().err
    assert f"error[app-failed-before-signing]: {key}: " in text
    assert said in text
    assert f"(spec.yaml:{_line_of(spec, 'config:')}:" in text
    assert _leftovers(tmp_path) == []


def test_an_app_with_no_source_is_refused_naming_app_source(tmp_path, cache, capsys):
    spec = write_detection_spec(tmp_path)
    spec.write_text(spec.read_text(encoding="utf-8").replace("  source: 0\n", ""),
                    encoding="utf-8")
    assert _build(spec, tmp_path / "out", cache) == 2
    text = capsys.readouterr().err
    assert "error[app-failed-before-signing]: app.source: no source given" in text
    assert f"(spec.yaml:{_line_of(spec, 'app:')}:1)" in text  # where app.source belongs
    assert _leftovers(tmp_path) == []


_CRASHES = {
    # the board image's OpenCV, built for NumPy 1.x, under the bundle's NumPy 2 (issue 26)
    "opencv": ("cv2", 'raise ImportError("numpy.core.multiarray failed to import")',
               "app: edgefuse.vision (frames, drawing, video) needs the Python package 'cv2'",
               "it exited with status 2"),
    # a native crash while the app sets up its detector
    "segfault": ("edgefuse.vision.detect.detector",
                 "os.kill(os.getpid(), signal.SIGSEGV)", "app: it was killed by SIGSEGV", None),
}


@pytest.mark.parametrize("crash", sorted(_CRASHES))
def test_an_app_that_cannot_import_or_crashes_is_refused(tmp_path, cache, capsys, monkeypatch,
                                                         crash):
    module, action, headline, detail = _CRASHES[crash]
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "class Crash:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        f"            {action}\n"
        "sys.meta_path.insert(0, Crash())\n", encoding="utf-8")
    path = os.pathsep.join(p for p in (str(hooks), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)  # the app's process only: this one imported already
    spec = write_detection_spec(tmp_path / "spec")
    assert _build(spec, tmp_path / "out", cache) == 2
    text = capsys.readouterr().err
    assert f"error[app-failed-before-signing]: {headline}" in text
    assert "the detection app over the model detector (models/boxes.onnx)" in text
    if detail:
        assert detail in text
    if crash == "opencv":
        assert "the trial runs the app with this build host's Python: install what it names" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hooks", "spec"]


def test_an_app_that_does_not_finish_in_time_is_stopped_and_refused(tmp_path, cache):
    spec_path = write_detection_spec(tmp_path)
    assert _build(spec_path, tmp_path / "out", cache) == 0
    bundle = tmp_path / "out" / "boxes-1.0.0"
    with pytest.raises(InputError, match=r"app: it did not finish 5 frames within 0.2 s"):
        try_app(bundle, load_spec(spec_path), timeout_s=0.2)


@pytest.mark.unit
def test_the_frame_size_is_the_cameras_else_one_that_holds_the_lines():
    assert frame_size({"camera": {"width": 800, "height": 600}}) == (600, 800)
    assert frame_size({"camera": {"width": None, "height": None}}) == DEFAULT_FRAME_SIZE
    assert frame_size({"lines": [{"start": [0, 0], "end": [1200, 700]}]}) == (720, 1280)
    assert frame_size({"sources": [{"source": 0, "zones": [
        {"polygon": [[0, 0], [1900, 0], [1900, 1000]]}]}]}) == (1080, 1920)


def _key(folder: Path) -> Path:
    (folder / "keys").mkdir()
    assert main(["keys", "new", "release", "-o", str(folder / "keys")]) == 0
    return folder / "keys" / "release.key.pem"
