"""The app as a service, in real processes with real signals: SIGTERM and SIGHUP stop it cleanly,
``kill -9`` leaves whole JSON lines, and systemd hears READY, WATCHDOG (only while frames flow)
and STOPPING on a notify socket the test listens on.

Every wait is for an event (a line on stderr, a record in the JSONL, a datagram), with a deadline
only as a guard; the live source is the kit's MJPEG server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from edgefuse.apps.stopping import stop_on_signals
from edgefuse.testing.mjpeg import MjpegServer
from tests.needs import optional
from tests.vision.models import write_clip

pytestmark = pytest.mark.ort

cv2 = optional("cv2")
ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0


class App:
    """``edgefuse detect`` in a child process; its stderr lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "edgefuse", "detect", *args, "--backend", "cpu",
             "--threads", "1"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def wait_for_line(self, pattern: str) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.process.poll() is None, "".join(self.stderr)
                continue
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r}:\n{''.join(self.stderr)}")

    def finish(self) -> tuple[int, str]:
        stdout, _ = self.process.communicate(timeout=DEADLINE_S)
        return self.process.returncode, stdout

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=DEADLINE_S)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def jsonl_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def no_temporaries(folder: Path) -> bool:
    return not [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(("signal_number", "reason", "exit_code"), [
    (signal.SIGTERM, "terminated", 0), (signal.SIGHUP, "hangup", 0),
    (signal.SIGINT, "interrupted", 130)])
def test_a_stop_signal_finishes_the_frames_in_flight_and_commits_every_output(
        tmp_path, detector_onnx, signal_number, reason, exit_code):
    write_clip(tmp_path / "clip.mp4", frames=3000)
    out, log = tmp_path / "out.mp4", tmp_path / "out.jsonl"
    app = App(["--model", str(detector_onnx), "--source", str(tmp_path / "clip.mp4"),
               "--save", str(out), "--jsonl", str(log), "--stats-every", "0.05"])
    try:
        app.wait_for_line(r"^\d+ frames ")  # a stats line: frames are flowing
        app.process.send_signal(signal_number)
        code, stdout = app.finish()
    finally:
        app.kill()
    assert code == exit_code, "".join(app.stderr)
    match = re.search(rf"stopped: {reason} after (\d+) frames read, every one finished", stdout)
    assert match, stdout
    read = int(match.group(1))
    assert re.search(rf"^{read} frames in ", stdout, re.M)  # the summary
    assert f"wrote {out}" in stdout and f"wrote {log}" in stdout
    assert [r["frame"] for r in jsonl_records(log)] == list(range(read))
    assert 0 < read < 3000
    capture = cv2.VideoCapture(str(out))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == read
    capture.release()
    assert no_temporaries(tmp_path)


def test_kill_9_on_a_live_run_leaves_whole_json_lines(tmp_path, detector_onnx):
    log = tmp_path / "live.jsonl"
    with MjpegServer(fps=100) as server:
        app = App(["--model", str(detector_onnx), "--source", server.url, "--jsonl", str(log),
                   "--stats-every", "0"])
        try:
            wait_until(lambda: len(jsonl_records(log)) >= 20, "records in the live JSONL")
            app.process.send_signal(signal.SIGKILL)
            app.process.communicate(timeout=DEADLINE_S)
        finally:
            app.kill()
    text = log.read_text()
    assert text.endswith("\n")
    frames = [json.loads(line)["frame"] for line in text.splitlines()]  # every line parses
    assert len(frames) >= 20 and frames == sorted(frames)


class NotifySocket:
    """A fake systemd: an abstract unix datagram socket collecting sd_notify messages."""

    def __init__(self) -> None:
        self.name = f"edgefuse-test-{uuid.uuid4().hex}"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind("\0" + self.name)
        self.messages: list[tuple[float, str]] = []

    @property
    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": "@" + self.name}

    def next(self, timeout: float) -> str | None:
        self.socket.settimeout(timeout)
        try:
            data = self.socket.recv(4096).decode()
        except TimeoutError:
            return None
        self.messages.append((time.monotonic(), data))
        return data

    def wait_for(self, field: str) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = self.next(1.0)
            if message is not None and field in message.split("\n"):
                return message
        raise AssertionError(f"no {field} among {[m for _, m in self.messages]}")

    def wait_for_silence(self, field: str, span_s: float) -> None:
        """Until ``span_s`` passes with no message holding ``field``."""
        deadline = time.monotonic() + DEADLINE_S
        last = time.monotonic()
        while time.monotonic() - last < span_s:
            assert time.monotonic() < deadline, f"{field} never stopped"
            message = self.next(0.05)
            if message is not None and field in message.split("\n"):
                last = time.monotonic()

    def close(self) -> None:
        self.socket.close()


def test_systemd_hears_ready_watchdog_only_while_frames_flow_and_stopping(tmp_path,
                                                                          detector_onnx):
    notify = NotifySocket()
    watchdog_s = 0.4  # pings every 0.2 s while frames flow
    log = tmp_path / "live.jsonl"
    server = MjpegServer(fps=100).start()
    app = App(["--model", str(detector_onnx), "--source", server.url, "--jsonl", str(log),
               "--stats-every", "0"],
              env={**notify.env, "WATCHDOG_USEC": str(int(watchdog_s * 1e6))})
    try:
        assert "STATUS=running: first frame read" in notify.wait_for("READY=1")
        for _ in range(3):  # frames flow: the watchdog is petted again and again
            notify.wait_for("WATCHDOG=1")
        assert log.exists() and jsonl_records(log)  # a live JSONL is visible during the run

        server.pause()  # the camera stalls: the pipeline finishes its frames, then no more pets
        assert server.idle.wait(DEADLINE_S)
        notify.wait_for_silence("WATCHDOG=1", span_s=5 * watchdog_s)
        server.resume()  # frames flow again: so do the pets
        notify.wait_for("WATCHDOG=1")

        app.process.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        code, stdout = app.finish()
    finally:
        app.kill()
        server.stop()
        notify.close()
    assert code == 0, "".join(app.stderr)
    assert "stopped: terminated" in stdout
    assert no_temporaries(tmp_path)


class _Interrupted:
    """What a stop request reaches: the pipeline's ``interrupt``."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def interrupt(self, reason: str) -> None:
        self.reasons.append(reason)


def test_a_sigterm_during_start_up_reaches_the_pipeline_once_it_exists():
    """systemd may stop the unit while the model still loads: the SIGTERM (a real one, to this
    process) is kept and delivered when the pipeline is attached, then later ones directly."""
    pipeline = _Interrupted()
    with stop_on_signals() as requests:
        signal.raise_signal(signal.SIGTERM)  # a real signal; its handler has run on return
        assert pipeline.reasons == []
        requests.attach(pipeline)
        assert pipeline.reasons == ["terminated"]
        signal.raise_signal(signal.SIGHUP)
    assert pipeline.reasons == ["terminated", "hangup"]
