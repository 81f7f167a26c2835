"""bench.soak for two minutes in CI: the detection app on a live camera while the camera drops,
the broker restarts, the card fills up, the wall clock steps back an hour and forward a day and
the app is hung up and started again; its memory stays flat and every event it emitted is
delivered, dropped with a reason or kept in the journal."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from bench import soak
from tests.needs import optional

pytestmark = [pytest.mark.slow, pytest.mark.torch]
optional("torch")
optional("cv2")
optional("paho.mqtt.client")
optional("prometheus_client")


def test_two_minutes_of_faults_keep_memory_flat_and_every_event_accounted_for(tmp_path):
    if not shutil.which("mosquitto") and not os.path.exists("/usr/sbin/mosquitto"):
        if os.environ.get("CI"):
            raise RuntimeError("CI must install mosquitto (apt-get install mosquitto)")
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    out = tmp_path / "soak.json"
    # JSON Lines on, on the card that fills up: recording stops and resumes, the app goes on
    assert soak.main(["--streams", "1", "--minutes", "2", "--fault-every", "8", "--outage-s",
                      "3", "--hangups", "1", "--warmup", "20",
                      "--out", str(out), "--work", str(tmp_path)]) == 0
    result = json.loads(out.read_text())
    assert result["harness_errors"] == []
    injected = result["faults"]
    assert injected["camera-drop"] and injected["broker-restart"] and injected["hangup"] == 1
    assert injected["disk-full"] or "disk-full" in result["faults_not_injected"]
    if os.environ.get("CI"):  # .ci/libfaketime.sh installs a libfaketime that passes the probe
        assert injected["clock-step"], result["faults_not_injected"].get("clock-step")
    else:
        assert injected["clock-step"] or "clock-step" in result["faults_not_injected"]
    assert [run["ended_by"] for run in result["runs"]] == ["hangup", "end"]  # no crash
    last = result["runs"][-1]["memory"]
    assert last["seconds"] >= 30, "the last run is long enough to judge its memory"
    assert last["rss_growth_pct"] < 5.0
    assert last["threads"][1] <= last["threads"][0] + 2 and last["fds"][1] <= last["fds"][0] + 2
    events = result["events"]
    assert events["emitted"] > 0 and events["accounted"]
    assert events["delivered_seen"] == events["delivered_acked"]
