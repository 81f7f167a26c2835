"""The event media keys of the detection app's config (``event_media``, ``clips``): checked with
the key and the file named, refused together where they make no sense."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefuse.apps import analytics
from edgefuse.apps.config import DetectionConfig, from_mapping
from edgefuse.errors import InputError
from edgefuse.vision.media.clips import ClipOptions
from edgefuse.vision.media.retention import EVENT_MEDIA, Retention
from tests.needs import optional

pytestmark = pytest.mark.unit


def test_a_folder_alone_or_with_limits():
    assert analytics.check_event_media("out/events", "event_media", "cfg.yaml") == {
        "dir": "out/events", "retention": EVENT_MEDIA}
    checked = analytics.check_event_media({"dir": "out", "max_age_h": 24, "max_mb": None},
                                          "event_media", "cfg.yaml")
    assert checked["retention"] == Retention(max_age_s=24 * 3600.0)


def test_clips_take_seconds_and_need_the_folder():
    optional("av")
    config = from_mapping(DetectionConfig, {"event_media": "ev", "clips": {"pre_s": 2}},
                          "cfg.yaml")
    options = analytics.media_options(config)
    assert options.folder == Path("ev") and options.clips == ClipOptions(pre_s=2.0)
    no_folder = from_mapping(DetectionConfig, {"clips": {"pre_s": 2}}, "cfg.yaml")
    with pytest.raises(InputError, match="'clips' needs 'event_media'") as caught:
        analytics.media_options(no_folder)
    assert "--event-media" in caught.value.hint


@pytest.mark.parametrize(("data", "message"), [
    ({"event_media": {"max_mb": 5}}, r"'event_media.dir' must name the folder"),
    ({"event_media": {"dir": "x", "max_age_h": 0}}, r"'event_media.max_age_h' must be above 0"),
    ({"event_media": {"dir": "x", "keep": 3}}, "keep"),
    ({"clips": {"pre_s": -1}}, r"'clips.pre_s'"),
    ({"clips": {"pre_s": 3, "post": 5}}, "post_s"),
    ({"clips": {"keyframe_s": 0}}, r"'clips.keyframe_s' must be above 0"),
    ({"clips": [3, 5]}, "mapping"),
])
def test_bad_keys_are_refused_with_the_key_and_file(data, message):
    optional("av")
    with pytest.raises(InputError, match=message) as caught:
        from_mapping(DetectionConfig, data, "cfg.yaml")
    assert caught.value.exit_code == 2 and "cfg.yaml" in str(caught.value)


def test_clips_without_pyav_say_what_to_install(monkeypatch):
    monkeypatch.setattr(analytics, "h264_available", lambda: False)
    with pytest.raises(InputError, match="needs PyAV") as caught:
        analytics.check_clips({"pre_s": 3}, "clips", "cfg.yaml")
    assert "edgefuse[vision]" in caught.value.hint
