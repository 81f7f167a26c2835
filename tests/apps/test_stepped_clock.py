"""A board's clock stepped under a running `edgefuse detect` (issue 31 §3): it boots in 1970,
NTP steps it to today, then it is stepped forward a day and back an hour, while an object goes in
and out of a zone; dwell stays what the monotonic clock says, and no video segment is lost.

The app runs under Debian's libfaketime (``LD_PRELOAD``), which fakes the wall clock only
(``FAKETIME_DONT_FAKE_MONOTONIC=1``: an NTP step never moves CLOCK_MONOTONIC), with its offset
read from a file on every call (``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``): the test
rewrites that file mid-run. The camera is an MJPEG server on 127.0.0.1 whose frame brightness
places the object of ``brightness_box_model`` left of the zone or in it. Every step waits for
the app's JSON Lines to show what it expects (a record, an event, the stepped wall clock).
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgefuse.model_info import AppInfo, embed
from edgefuse.testing.mjpeg import MjpegServer
from tests.needs import optional
from tests.vision.models import brightness_box_model

pytestmark = pytest.mark.ort
optional("cv2")
optional("onnxruntime")
optional("scipy")

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
SEGMENT_S = 0.5
KEEP = 3
OUTSIDE, INSIDE = 100, 156  # frame brightness: the object's centre at x 25 (out) or 39 (in)
DAY, HOUR = 86400, 3600


def _libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if found:
        return found[0]
    if os.environ.get("CI"):
        raise RuntimeError("CI must install libfaketime (apt-get install faketime libfaketime)")
    pytest.skip("libfaketime is not installed (apt-get install faketime libfaketime)")


class Records:
    """The app's JSON Lines, read as they are appended."""

    def __init__(self, path: Path, process: subprocess.Popen) -> None:
        self.path, self.process = path, process
        self.seen: list[dict] = []
        self._offset = 0
        self._partial = b""

    def _read(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        self.seen += [json.loads(line) for line in lines if line.strip()]

    def wait(self, condition, what: str) -> dict:
        """The first record from now on for which ``condition`` holds."""
        start = len(self.seen)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            self._read()
            for record in self.seen[start:]:
                if condition(record):
                    return record
            start = len(self.seen)
            if self.process.poll() is not None:
                raise AssertionError(f"the app ended waiting for {what}:\n"
                                     f"{self.process.communicate()[1]}")
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)  # a poll of the file, not a wait for something to happen


def _event(kind: str):
    return lambda record: any(e["type"] == kind for e in record.get("events", []))


def _segments(monos: list[float]) -> int:
    """How many segments frames captured at ``monos`` (the monotonic clock) make: a new one
    starts with the first frame ``SEGMENT_S`` or more after the current one's first."""
    count, start = 1, monos[0]
    for mono in monos[1:]:
        if mono - start >= SEGMENT_S:
            count, start = count + 1, mono
    return count


def _of(record: dict, kind: str) -> dict:
    return next(e for e in record["events"] if e["type"] == kind)


def test_dwell_and_segments_survive_a_clock_stepped_from_1970_forward_a_day_and_back(tmp_path):
    library = _libfaketime()
    model = tmp_path / "box.onnx"
    info = AppInfo.from_dict({"task": "detect", "classes": ["thing", "other"],
                              "postprocess": {"layout": "yolov8"}})
    onnx.save(embed(brightness_box_model(box=(16, 24, 8)), info), model)
    config = tmp_path / "detect.yaml"
    config.write_text(
        "zones:\n  - {name: bay, polygon: [[32, 0], [64, 0], [64, 64], [32, 64]], "
        "confirm_frames: 2}\n"
        f"event_media: {tmp_path / 'events'}\n"
        f"segment_s: {SEGMENT_S}\nsegment_keep: {KEEP}\n")
    clock = tmp_path / "faketime.rc"
    today = int(time.time())
    clock.write_text(f"-{today - DAY}\n")  # the board's clock: 1970-01-02
    level = [OUTSIDE]
    camera = MjpegServer(fps=50, size=(64, 64),
                         scene=lambda number: np.full((64, 64, 3), level[0], np.uint8))
    camera.start()
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LD_PRELOAD": library,
           "FAKETIME_TIMESTAMP_FILE": str(clock), "FAKETIME_CACHE_DURATION": "1",
           "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    app = subprocess.Popen(
        [sys.executable, "-m", "edgefuse", "detect", "--config", str(config), "--model",
         str(model), "--source", camera.url, "--jsonl", str(out / "cam.jsonl"), "--save",
         str(out / "cam.mp4"), "--backend", "cpu", "--threads", "1", "--stats-every", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    records = Records(out / "cam.jsonl", app)
    try:
        first = records.wait(lambda r: r.get("tracks"), "the object tracked")
        assert first["time"] < 3 * DAY  # the app runs in 1970

        clock.write_text("+0\n")  # NTP answers
        records.wait(lambda r: r["time"] > today - HOUR, "the clock stepped to today")
        dwells = []
        for step, seen in ((f"+{DAY}", lambda r: r["time"] > today + 0.5 * DAY),
                           (f"+{DAY - HOUR}", lambda r: r["time"] < today + DAY - 0.5 * HOUR)):
            began = time.monotonic()
            level[0] = INSIDE
            entered = records.wait(_event("zone_entered"), "the object in the zone")
            clock.write_text(step + "\n")
            records.wait(seen, f"the clock stepped {step}")
            level[0] = OUTSIDE
            left = records.wait(_event("zone_left"), "the object out of the zone")
            span = time.monotonic() - began  # the test's own clock: an upper bound
            dwell = _of(left, "zone_left")["dwell_s"]
            assert 0 < dwell <= span, (step, dwell, span)
            assert dwell == pytest.approx(left["mono"] - entered["mono"], abs=0.1)
            assert _of(left, "zone_left")["mono"] == pytest.approx(left["mono"], abs=1e-3)
            dwells.append(dwell)
        stepped_back = records.seen[-1]["mono"]
        records.wait(lambda r: r["mono"] > stepped_back + 3 * SEGMENT_S,
                     "segments finished after the step back")
        app.send_signal(signal.SIGTERM)
        stdout, stderr = app.communicate(timeout=DEADLINE_S)
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate(timeout=DEADLINE_S)
        camera.stop()
    assert app.returncode == 0, stderr
    records._read()
    frames = [r for r in records.seen if "frame" in r]
    monos = [r["mono"] for r in frames]
    assert monos == sorted(monos)  # the records' monotonic clock never went back
    steps = np.diff([r["time"] for r in frames])
    assert steps.min() < -0.9 * HOUR and steps.max() > 0.9 * DAY  # the wall clock did
    # video: segments SEGMENT_S long on the monotonic clock, numbered in order; keep held
    # the newest by number (wall-clock names would sort the ones after the step back first)
    written = re.search(r"wrote (\d+) video segment\(s\): (\S+) \.\. (\S+)", stdout)
    assert written, stdout
    count, last = int(written.group(1)), Path(written.group(3)).name
    assert count == _segments(monos)
    kept = sorted(p.name for p in out.glob("cam-*.mp4"))
    assert kept[-1] == last and len(kept) == KEEP
    assert [int(name.split("-")[1]) for name in kept] == [count - 2, count - 1, count]
    snapshots = sorted((tmp_path / "events" / "stream0").glob("*.jpg"))
    assert len(snapshots) == 2  # one per zone entry, neither written over the other
