"""`edgefuse detect` restarted while its MQTT broker is away: the first run starts without the
broker and keeps its events in the journal on disk; the second, with the broker back, delivers
them first, then its own, in order; each run's summary accounts for every event."""

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
optional("paho.mqtt.client")
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0", "--max-frames", "90"]


def _run(config, out, capsys) -> tuple[list[dict], str]:
    code = main(["detect", "--config", str(config), "--model", "shapes_yolov8", "--source",
                 str(SAMPLE_CLIP), "--jsonl", str(out), *QUIET])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return [e for r in records for e in r.get("events", [])], printed.out


def test_events_wait_on_disk_across_a_restart_until_the_broker_returns(tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    broker = Broker(tmp_path)  # its port, not started yet: the broker is away
    config = tmp_path / "detect.yaml"
    config.write_text(
        "lines:\n"
        "  - {name: middle, start: [160, 0], end: [160, 240], margin: 2, anchor: center}\n"
        f"events: {{mqtt: {{host: 127.0.0.1, port: {broker.port}, prefix: cams}},\n"
        f"         journal: {{dir: {tmp_path / 'state'}, max_mb: 1}}}}\n")
    first, printed = _run(config, tmp_path / "first.jsonl", capsys)
    assert first, "the clip's shapes cross the middle line"
    assert (f"events mqtt: {len(first)} emitted, 0 delivered, {len(first)} queued "
            f"({len(first)} in the journal), 0 dropped") in printed
    broker.start()
    try:
        subscriber = Subscriber(broker.port, "cams/#")
        subscriber.wait_subscribed()
        second, printed = _run(config, tmp_path / "second.jsonl", capsys)
        total = len(first) + len(second)
        assert (f"events mqtt: {len(second)} emitted (and {len(first)} from the last run's "
                f"journal), {total} delivered, 0 queued (0 in the journal), 0 dropped") in printed
        assert subscriber.wait_for(lambda m: len(m) >= total)
        subscriber.close()
    finally:
        broker.stop()
    assert [payload for _, payload in subscriber.messages] == first + second
    assert (tmp_path / "state" / "mqtt.journal").stat().st_size == 0
