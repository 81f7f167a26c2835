"""`edgefuse detect` with tracking, a counting line, MQTT events and their snapshots, end to end on
the trained shapes detector over the sample clip: the JSON Lines, the counts and the broker
agree."""

from __future__ import annotations

import json

import pytest

from edgefuse.cli.main import main
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.needs import optional
from tests.vision.events.broker import Broker, Subscriber

pytestmark = pytest.mark.torch
optional("torch")
optional("cv2")
optional("scipy")
optional("paho.mqtt.client")
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]


def test_tracks_counts_and_events_agree_across_jsonl_and_broker(tmp_path, capsys):
    broker = Broker(tmp_path)
    broker.start()
    try:
        subscriber = Subscriber(broker.port, "cams/#")
        subscriber.wait_subscribed()
        config = tmp_path / "detect.yaml"
        config.write_text(
            "track: true\n"
            "lines:\n"
            "  - {name: middle, start: [160, 0], end: [160, 240], margin: 2, anchor: center}\n"
            "  - {name: across, start: [0, 120], end: [320, 120], margin: 2, anchor: center}\n"
            f"events: {{mqtt: {{host: 127.0.0.1, port: {broker.port}, prefix: cams}}}}\n"
            f"event_media: {tmp_path / 'events'}\n")
        out = tmp_path / "out.jsonl"
        code = main(["detect", "--config", str(config), "--model", "shapes_yolov8", "--source",
                     str(SAMPLE_CLIP), "--max-frames", "150", "--jsonl", str(out), *QUIET])
        assert code == 0, capsys.readouterr().err
        records = [json.loads(line) for line in out.read_text().splitlines()]
        events = [e for r in records for e in r.get("events", [])]
        assert events, "the clip's shapes cross the middle lines"
        assert subscriber.wait_for(lambda m: len(m) >= len(events))
        subscriber.close()
    finally:
        broker.stop()
    assert sorted(json.dumps(p, sort_keys=True) for _, p in subscriber.messages) == sorted(
        json.dumps(e, sort_keys=True) for e in events)
    final = records[-1]["counts"]["lines"]
    for name in ("middle", "across"):
        crossed = [e for e in events if e["line"] == name]
        assert sum(sum(v.values()) for v in final[name].values()) == len(crossed)
    assert all(r["tracks"] and {"id", "box"} <= set(r["tracks"][0]) for r in records[5:10])
    assert {e["stream"] for e in events} == {"stream0"}
    # each crossing reached the broker naming its snapshot, a file there before it was published
    assert all((tmp_path / "events" / p["snapshot"]).is_file() for _, p in subscriber.messages)
