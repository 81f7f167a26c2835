"""The example specs: the tiny one builds a working detection bundle from the catalogue; the
shapes one is valid as soon as the embedded trained models are in the catalogue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgefuse.bundle.builder import build
from edgefuse.bundle.bundle_check import verify_bundle
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_problems import SpecError
from edgefuse.cli.main import main
from edgefuse.models.catalogue import CATALOGUE
from tests.bundle.wheelhouse import fill_wheelhouse
from tests.needs import optional

pytestmark = pytest.mark.torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _offline(example: Path, folder: Path) -> Path:
    """The example with its wheels from a local wheelhouse of pure stand-ins (no index here;
    tests/bundle/test_real_index.py resolves the real ones)."""
    text = example.read_text(encoding="utf-8")
    assert "wheels: download" in text
    spec = folder / example.name
    fill_wheelhouse(folder / "wheelhouse")
    spec.write_text(text.replace("wheels: download", "wheels: wheelhouse"), encoding="utf-8")
    return spec


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache for the tiny example's builds: yolov8n:tiny converts once."""
    return tmp_path_factory.mktemp("examples-cache")


def test_the_tiny_example_builds_a_detection_bundle(tmp_path, cache):
    optional("torch")
    outcome = build(_offline(EXAMPLES / "tiny-camera.yaml", tmp_path / "spec"), tmp_path / "out",
                    cache_dir=cache, progress=False)
    bundle = outcome.bundle_dir
    log = json.loads((tmp_path / "out" / "build-log.json").read_text())
    assert [run["backend"] for run in log["app"]["runs"]] == ["sim", "cpu"]  # the app started
    metadata = json.loads((bundle / "models/detector/metadata.json").read_text())
    assert metadata["classes"] == []  # yolov8n:tiny's 80 classes, unnamed (class0..class79)
    assert metadata["postprocess"]["layout"] == "yolov8" and metadata["task"] == "detect"
    assert metadata["preprocess"]["size"] == [96, 96]
    seg = json.loads((bundle / "models/segmenter/metadata.json").read_text())
    assert seg["postprocess"]["layout"] == "seg_logits"
    assert "edgefuse detect --config" in (bundle / "systemd/edgefuse-tiny-camera.service"
                                          ).read_text()
    report = verify_bundle(outcome.archive, backends=("cpu",))
    assert report.passed


def test_the_tiny_example_as_issue_26_found_it_is_refused_before_signing(tmp_path, cache,
                                                                         capsys):
    """It named 3 classes for yolov8n:tiny's 80: built, signed, shipped, failed on every board."""
    optional("torch")
    spec = _offline(EXAMPLES / "tiny-camera.yaml", tmp_path / "spec")
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("    precision: {keep_fp32: none}\n",
                                 "    precision: {keep_fp32: none}\n"
                                 "    classes: [circle, square, triangle]\n", 1),
                    encoding="utf-8")
    assert main(["build", str(spec), "-o", str(tmp_path / "out"), "--cache", str(cache),
                 "--no-progress"]) == 2
    said = capsys.readouterr().err
    assert ("error[app-failed-before-signing]: models[0].classes: the outputs output "
            "float32[1,84,189] do not hold 3 classes") in said
    assert "as yolov8 it has 80 classes" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec"]


def test_the_shapes_example_names_only_the_embedded_models():
    optional("torch")
    if {"shapes_yolov8", "shapes_deeplabv3plus"} <= set(CATALOGUE):
        spec = load_spec(EXAMPLES / "shapes-camera.yaml")
        assert [m.source_kind for m in spec.models] == ["catalogue", "catalogue"]
        return
    with pytest.raises(SpecError) as caught:
        load_spec(EXAMPLES / "shapes-camera.yaml")
    assert {p.path[-1] for p in caught.value.problems} == {"source"}
