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


def test_the_tiny_example_builds_a_detection_bundle(tmp_path):
    optional("torch")
    outcome = build(_offline(EXAMPLES / "tiny-camera.yaml", tmp_path / "spec"), tmp_path / "out",
                    cache_dir=tmp_path / "c", progress=False)
    bundle = outcome.bundle_dir
    metadata = json.loads((bundle / "models/detector/metadata.json").read_text())
    assert metadata["classes"] == ["circle", "square", "triangle"]
    assert metadata["postprocess"]["layout"] == "yolov8" and metadata["task"] == "detect"
    assert metadata["preprocess"]["size"] == [96, 96]
    seg = json.loads((bundle / "models/segmenter/metadata.json").read_text())
    assert seg["postprocess"]["layout"] == "seg_logits"
    assert "edgefuse detect --config" in (bundle / "systemd/edgefuse-tiny-camera.service"
                                          ).read_text()
    report = verify_bundle(outcome.archive, backends=("cpu",))
    assert report.passed


def test_the_shapes_example_names_only_the_embedded_models():
    optional("torch")
    if {"shapes_yolov8", "shapes_deeplabv3plus"} <= set(CATALOGUE):
        spec = load_spec(EXAMPLES / "shapes-camera.yaml")
        assert [m.source_kind for m in spec.models] == ["catalogue", "catalogue"]
        return
    with pytest.raises(SpecError) as caught:
        load_spec(EXAMPLES / "shapes-camera.yaml")
    assert {p.path[-1] for p in caught.value.problems} == {"source"}
