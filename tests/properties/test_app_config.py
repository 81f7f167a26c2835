"""App configs as strangers write them: every mutation of a full detection config loads, or is
refused with ``error[...]`` (exit 2), through the checks the app runs before the model loads."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from edgefuse.apps import analytics
from edgefuse.apps import config as app_config
from edgefuse.apps.config import DetectionConfig
from edgefuse.apps.streams import plan_streams
from tests.properties.strangers import PROPERTIES, assert_clean_exit, cli, mutated, outcome

pytestmark = pytest.mark.unit

# Every kind of key the app reads: streams, thresholds, outputs, analytics, events, the view.
CONFIG = {
    "model": "shapes_yolov8", "sources": [{"name": "gate", "source": "clip.mp4", "stride": 1},
                                          {"name": "yard", "source": "frames/", "live": False}],
    "backend": ["cpu"], "batch": 2, "batch_wait_ms": 5, "conf": 0.3, "iou": 0.5, "max_det": 50,
    "classes": [0, "square"], "class_names": ["square", "circle"],
    "preprocess": {"size": [320, 320], "pad_value": 0}, "layout": "yolov8",
    "strides": [8, 16, 32], "max_frames": 10, "jsonl": "out/{name}.jsonl",
    "jsonl_rotate": {"max_mb": 1.0, "keep": 2}, "save": "out/{name}.mp4", "segment_s": 60.0,
    "queue_size": 2, "stop_timeout_s": 5.0, "stats_every": 0,
    "track": {"track_thresh": 0.5, "track_buffer": 30},
    "lines": [{"name": "door", "start": [0, 100], "end": [200, 100], "margin": 3}],
    "zones": [{"name": "bay", "polygon": [[0, 0], [100, 0], [100, 100]], "confirm_frames": 2}],
    "events": {"mqtt": {"host": "127.0.0.1", "port": 1883, "prefix": "edgefuse"},
               "webhook": {"url": "http://127.0.0.1:9/hook"}},
    "event_media": "media/", "clips": {"pre_s": 1, "post_s": 1},
    "serve": "127.0.0.1:0", "serve_token": None,
}


def _checked(text: str) -> str:
    """What the app does with a config file before it opens the model."""
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        for name in ("out", "media", "frames"):
            Path(name).mkdir()
        Path("clip.mp4").write_bytes(b"")
        path = Path(folder) / "config.yaml"
        path.write_text(text, encoding="utf-8")

        def load() -> None:
            config = app_config.load(DetectionConfig, path)
            plan_streams(config, config_file=str(path))
            analytics.of(config)
        return outcome(load)


def test_the_base_config_is_valid():
    assert _checked(yaml.safe_dump(CONFIG)) == "ok"


@PROPERTIES
@given(mutated(CONFIG))
def test_any_mutation_of_a_config_loads_or_is_refused_clearly(data):
    _checked(yaml.safe_dump(data, allow_unicode=True))


@PROPERTIES
@given(st.text(max_size=200))
@example("model: [")
@example("\t- a")
def test_any_text_as_a_config_loads_or_is_refused_clearly(text):
    _checked(text)


def test_a_mangled_config_exits_2_with_its_reference_from_the_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("out", "media", "frames"):
        (tmp_path / name).mkdir()
    (tmp_path / "clip.mp4").write_bytes(b"")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "zones": [{"name": "bay", "polygon": "nan"}]}))
    done = cli("detect", "--config", str(path))
    assert_clean_exit(done)
    assert done.returncode == 2 and "error[bad-config]" in done.stderr, done.stderr
