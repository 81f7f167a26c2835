"""`edgefuse detect` on broken cameras and files (issue 31 §4): a live MJPEG camera on 127.0.0.1
sending broken JPEGs and garbage, then switching resolution and dropping the connection; one
switching to another aspect ratio; truncated H.264 files made with PyAV. No traceback anywhere:
frames skipped and counted (the summary, ``/metrics``), a reconnect where the transport broke,
zones rescaled or the stream refused with both sizes named."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from edgefuse.cli.main import main
from edgefuse.testing.mjpeg import MjpegServer, part
from tests.needs import optional
from tests.vision.streams.test_broken_cameras import (
    BROKEN_PARTS,
    FIRST_CONNECTION,
    GARBAGE_RUNS,
    PACE_FPS,
    SECOND_CONNECTION,
    jpeg,
)

pytestmark = pytest.mark.ort
optional("cv2")
optional("scipy")
optional("prometheus_client")
ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]
ZONE = "zones:\n  - {name: bay, polygon: [[0, 0], [64, 0], [64, 48], [0, 48]]}\n"


class App:
    """``edgefuse detect`` in a child process, its stderr lines collected as they come."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "edgefuse", "detect", *args, *QUIET], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def wait_for_line(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.process.poll() is None, "".join(self.stderr)
                continue
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matching {pattern!r}:\n{''.join(self.stderr)}")

    def finish(self) -> tuple[int, str, str]:
        stdout, _ = self.process.communicate(timeout=DEADLINE_S)
        return self.process.returncode, stdout, "".join(self.stderr)


def _metric(url: str, name: str) -> float | None:
    with urllib.request.urlopen(url + "metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf'^{name}\{{stream="stream0"\}} (\S+)$', text, re.MULTILINE)
    return None if found is None else float(found.group(1))


def test_broken_parts_are_counted_in_metrics_and_summary_and_zones_follow_the_resolution(
        tmp_path, detector_onnx):
    camera = MjpegServer(PACE_FPS, scripts=[FIRST_CONNECTION, SECOND_CONNECTION]).start()
    config = tmp_path / "detect.yaml"
    config.write_text(ZONE + "serve: 127.0.0.1:0\n"
                      "reconnect: {attempts: 3, backoff_s: 0.05, max_backoff_s: 0.1}\n")
    app = App(["--config", str(config), "--model", str(detector_onnx), "--source", camera.url,
               "--jsonl", str(tmp_path / "out.jsonl")])
    try:
        # (a log line of another thread may follow the URL before its newline)
        url = app.wait_for_line(r"live view: (http://[\d.]+:\d+/)").group(1)
        deadline = time.monotonic() + DEADLINE_S
        while (_metric(url, "edgefuse_reconnects_total") or 0) < 1:  # the second connection
            assert time.monotonic() < deadline and app.process.poll() is None, app.stderr
            time.sleep(0.05)  # a poll of /metrics
        errors = _metric(url, "edgefuse_decode_errors_total")
        app.process.send_signal(signal.SIGTERM)
        code, stdout, stderr = app.finish()
    finally:
        if app.process.poll() is None:
            app.process.kill()
        camera.stop()
    assert code == 0, stderr
    assert errors == BROKEN_PARTS + GARBAGE_RUNS
    assert f"decode_errors {BROKEN_PARTS + GARBAGE_RUNS}" in stdout
    assert "Traceback" not in stderr
    assert "the frame size changed from 64x48 to 128x96 mid-stream; lines and zones rescaled" \
        in stderr
    sizes = {(r["size"]["width"], r["size"]["height"])
             for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())
             if "size" in r}
    assert (128, 96) in sizes  # (the 64x48 frames may all be stale before the model is warm)


def test_a_camera_switching_to_another_aspect_ratio_stops_with_a_clear_error(
        tmp_path, detector_onnx, capsys):
    camera = MjpegServer(PACE_FPS, scripts=[[part(jpeg(10)), part(jpeg(20)),
                                             part(jpeg(30, (36, 64))),
                                             part(jpeg(40, (36, 64)))]]).start()
    config = tmp_path / "detect.yaml"
    config.write_text(ZONE)
    try:
        code = main(["detect", "--config", str(config), "--model", str(detector_onnx),
                     "--source", camera.url, *QUIET])
    finally:
        camera.stop()
    err = capsys.readouterr().err
    assert code == 2, err
    assert re.search(r"error\[bad-source\]: stream 'stream0': the frame size changed from "
                     r"64x48 to 64x36 mid-stream; its lines and zones are pixels of 64x48", err)
    assert "Traceback" not in err


def _truncated_clip(path: Path, frames: int = 50) -> Path:
    """An H.264 clip of ``frames`` frames written with PyAV, then cut at 60 % of its bytes."""
    av = optional("av")
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for index in range(frames):
            image = np.full((48, 64, 3), 40, np.uint8)
            image[:, index % 54:index % 54 + 10] = 220
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    data = path.read_bytes()
    cut = path.with_name("cut" + path.suffix)
    cut.write_bytes(data[:int(len(data) * 0.6)])
    return cut


def test_a_truncated_mkv_gives_the_frames_before_the_cut_and_counts_the_rest(
        tmp_path, detector_onnx, capsys, caplog):
    cut = _truncated_clip(tmp_path / "clip.mkv")
    out = tmp_path / "out.jsonl"
    code = main(["detect", "--model", str(detector_onnx), "--source", str(cut), "--jsonl",
                 str(out), *QUIET])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = out.read_text().splitlines()
    errors = int(re.search(r"decode_errors (\d+)", captured.out).group(1))
    assert 0 < len(records) < 50 and len(records) + errors == 50  # every frame accounted for
    assert "a truncated file?" in caplog.text and "Traceback" not in captured.err


def test_a_truncated_mp4_is_refused_with_why(tmp_path, detector_onnx, capsys):
    cut = _truncated_clip(tmp_path / "clip.mp4")
    code = main(["detect", "--model", str(detector_onnx), "--source", str(cut), *QUIET])
    err = capsys.readouterr().err
    assert code == 2
    assert "error[bad-source]: cannot open the video" in err and "moov atom" in err
    assert "Traceback" not in err
