"""The analytics keys of the detection app's config: checked with the key and the file named."""

from __future__ import annotations

import pytest

from edgefuse.apps import analytics
from edgefuse.errors import InputError

pytestmark = pytest.mark.unit


def test_lines_and_zones_are_checked_and_kept():
    lines = analytics.check_lines([{"name": "door", "start": [0, 10], "end": [100, 10]}],
                                  "lines", "cfg.yaml")
    assert lines == ({"name": "door", "start": (0, 10), "end": (100, 10)},)
    zones = analytics.check_zones([{"name": "bay", "polygon": [[0, 0], [5, 0], [5, 5]],
                                    "confirm_frames": 3}], "zones", "cfg.yaml")
    assert zones[0]["polygon"] == [(0, 0), (5, 0), (5, 5)] and zones[0]["confirm_frames"] == 3


@pytest.mark.parametrize(("check", "value", "message"), [
    (analytics.check_lines, [{"name": "d", "start": [5, 5], "end": [5, 5]}], "zero length"),
    (analytics.check_lines, [{"start": [0, 0], "end": [1, 1]}], r"'lines\[0\].name'"),
    (analytics.check_lines, [{"name": "d", "start": [0], "end": [1, 1]}],
     r"'lines\[0\].start' must be a list of 2 numbers"),
    (analytics.check_lines, [{"name": "d", "start": [0, 0], "end": [1, 1], "anchor": "top"}],
     "anchor"),
    (analytics.check_zones, [{"name": "z", "polygon": [[0, 0], [1, 1]]}], "at least 3"),
    (analytics.check_zones, [{"name": "z", "polygon": [[0, 0], [1, 1]], "color": 1}],
     "color"),
    (analytics.check_events, {"mqtt": {"port": 1883}}, "must name the broker"),
    (analytics.check_events, {"mqtt": {"host": "h", "port": 70000}}, "port"),
    (analytics.check_events, {"journal": {"max_mb": 5}}, r"'events.journal.dir' must name"),
    (analytics.check_events, {"journal": {"dir": "j", "max_mb": 0}}, "at least 0.001"),
    (analytics.check_events, {"journal": {"dir": "j", "max_bytes": 5}}, "max_bytes"),
    (analytics.check_serve, "localhost:http", "HOST:PORT"),
    (analytics.check_track, {"track_thresh": 0.2, "low_thresh": 0.5}, "low_thresh"),
])
def test_bad_analytics_keys_are_refused_with_the_key(check, value, message):
    key = check.__name__.removeprefix("check_")
    with pytest.raises(InputError, match=message) as caught:
        check(value, key, "cfg.yaml")
    assert "cfg.yaml" in caught.value.render()


def test_serve_takes_host_port_or_port():
    assert analytics.check_serve("0.0.0.0:9000", "serve", "") == ("0.0.0.0", 9000)
    assert analytics.check_serve(8080, "serve", "") == ("127.0.0.1", 8080)
    assert analytics.check_serve("[::1]:8080", "serve", "") == ("::1", 8080)


def test_the_events_journal_is_on_by_default_only_under_a_service_state_folder(monkeypatch):
    events = analytics.check_events({"mqtt": {"host": "h"}}, "events", "cfg.yaml")
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert analytics.default_journal(events) is None
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/edgefuse/cams:/var/lib/other")
    assert analytics.default_journal(events) == {"dir": "/var/lib/edgefuse/cams/events",
                                                 "max_bytes": 64_000_000}
    off = analytics.check_events({"mqtt": {"host": "h"}, "journal": False}, "events", "")
    assert analytics.default_journal(off) is None
    asked = analytics.check_events({"journal": "/data/ev"}, "events", "")
    assert analytics.default_journal(asked) == {"dir": "/data/ev", "max_bytes": 64_000_000}
