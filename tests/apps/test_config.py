"""The apps' YAML config: defaults, the shipped configs, and bad values refused by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefuse.apps import config
from edgefuse.apps.config import DetectionConfig, SegmentationConfig
from edgefuse.errors import InputError
from edgefuse.vision.streams.sources import CameraOptions, Reconnect

pytestmark = pytest.mark.unit

APPS = Path(__file__).resolve().parents[2] / "apps"


def test_the_shipped_configs_are_the_defaults():
    assert config.load(DetectionConfig, APPS / "detection" / "config.yaml") == DetectionConfig()
    assert config.load(SegmentationConfig,
                       APPS / "segmentation" / "config.yaml") == SegmentationConfig()


def test_values_are_checked_and_normalised(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: m.onnx\nsource: 0\nbackend: cpu\nclasses: [0, square]\n"
                    "reconnect: {attempts: null, backoff_s: 0.1}\ncamera: {width: 640}\n")
    loaded = config.load(DetectionConfig, path)
    assert loaded.source == 0 and loaded.backend == ("cpu",) and loaded.classes == (0, "square")
    assert loaded.reconnect == Reconnect(attempts=None, backoff_s=0.1)
    assert loaded.camera == CameraOptions(width=640)


@pytest.mark.parametrize(("text", "message"), [
    ("conf_thres: 0.4\n", "(?s)unknown key 'conf_thres'.*did you mean 'conf'"),
    ("conf: high\n", "'conf' must be a number"),
    ("conf: 1.5\n", r"'conf' must be in 0\.\.1"),
    ("backend: [cpu, tpu]\n", "unknown backend"),
    ("stride: 0\n", "'stride' must be in 1"),
    ("show: yes please\n", "'show' must be true or false"),
    ("reconnect: {atempts: 3}\n", "(?s)unknown key 'atempts'.*did you mean 'attempts'"),
    ("camera: {fourcc: MJPEG}\n", "four characters"),
    ("- a list\n", "expected a mapping"),
    ("model: [unclosed\n", "not valid YAML"),
])
def test_bad_configs_name_the_key_and_the_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as caught:
        config.load(DetectionConfig, path)
    assert caught.value.reference == "bad-config" and str(path) in str(caught.value)


def test_segmentation_keys_are_not_detection_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("palette: cityscapes\n")
    assert config.load(SegmentationConfig, path).palette == "cityscapes"
    with pytest.raises(InputError, match="unknown key 'palette'"):
        config.load(DetectionConfig, path)


def test_a_missing_config_file(tmp_path):
    with pytest.raises(InputError, match="cannot read the config"):
        config.load(DetectionConfig, tmp_path / "nope.yaml")


def test_sources_take_plain_sources_and_named_streams_with_their_own_options(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sources:\n  - 0\n  - {name: gate, url: 'rtsp://h/s', stride: 2,\n"
                    "     lines: [{name: door, start: [0, 5], end: [9, 5]}]}\n")
    loaded = config.load(DetectionConfig, path)
    assert [(s.source, s.name) for s in loaded.sources] == [(0, None), ("rtsp://h/s", "gate")]
    assert loaded.sources[1].options["stride"] == 2
    assert loaded.sources[1].options["lines"][0]["end"] == (9, 5)


@pytest.mark.parametrize(("text", "message"), [
    ("sources: []\n", "'sources' must be a non-empty list"),
    ("sources: [{name: a}]\n", r"'sources\[0\]' needs one of 'source' or 'url'"),
    ("sources: [{source: a, url: b}]\n", r"'sources\[0\]' needs one of"),
    ("sources: [{source: a, strid: 2}]\n", "unknown key 'strid'"),
    ("sources: [{source: a, stride: 0}]\n", r"'sources\[0\].stride' must be in 1"),
    ("sources: [{source: a, lines: [{name: l, start: [0, 0], end: [0, 0]}]}]\n",
     "zero length"),
    ("batch: 0\n", "'batch' must be in 1"),
    ("batch_wait_ms: .inf\n", "'batch_wait_ms' must be finite"),
])
def test_bad_sources_and_batch_keys_are_refused(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        config.load(DetectionConfig, path)
