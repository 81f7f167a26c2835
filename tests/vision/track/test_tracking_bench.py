"""bench.tracking's detector mode on a few frames: the shipped detector sees the rendered clip,
its boxes are where the clip's own labels are, and both trackers are scored on them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bench._harness
from bench import tracking
from edgefuse.metrics.detect import box_iou
from tests.needs import optional

pytestmark = [pytest.mark.slow, pytest.mark.torch]
optional("torch")
optional("cv2")


@pytest.fixture(scope="module")
def detector_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench._harness, "MODELS_DIR", folder)
        return bench._harness.export_catalogue_model("shapes_yolov8", "full")


def test_the_detector_finds_the_clips_labelled_objects(detector_model):
    truth, dets = tracking.detector_sequence(tracking.open_detector(detector_model), seed=0,
                                             frames=6)
    assert len(truth) == len(dets) == 6
    found = [(box_iou(scene.boxes, frame.boxes).max(axis=1, initial=0.0) >= 0.5).mean()
             for scene, frame in zip(truth, dets, strict=True) if len(scene.boxes)]
    assert np.mean(found) > 0.8  # the clip's labels in frame pixels, as the detector reports
    assert all(len(scene.ids) == len(scene.boxes) for scene in truth)


def test_detector_mode_scores_both_trackers(detector_model, tmp_path, monkeypatch, capsys):
    optional("trackeval")  # the peer and the scores: in the dev extra, so CI runs this
    optional("trackers")
    monkeypatch.setattr(tracking, "RESULTS", tmp_path)
    monkeypatch.setattr(tracking, "export_catalogue_model", lambda name, variant: detector_model)
    assert tracking.main(["--mode", "detector", "--detector-frames", "8", "--reps", "1"]) == 0
    record = json.loads((tmp_path / "tracking.json").read_text())
    assert "gt-noise" not in record
    for name in tracking.TRACKERS:
        row = record["detector"][name]
        assert all(0.0 <= row[m] <= 1.0 for m in ("HOTA", "DetA", "AssA", "IDF1"))
        assert row["DetA"] > 0.5 and row["objects_per_frame"] >= 4  # tracks on the shapes
    printed = capsys.readouterr().out
    assert "detector mode: 8 frames" in printed and "gt-noise mode" not in printed
