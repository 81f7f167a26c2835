"""A full disk, for real: a small tmpfs mounted for the test and filled, the real CLI run onto it.

A one-shot run exits 2 with ``error[disk-full]`` naming the file and leaves nothing that looks
finished (no output, no temporary); a live run keeps inferring while its recordings are stopped,
says so in the log, ``/healthz`` and ``/metrics``, and records again once the test frees space.
Every wait is for a line on stderr or a file the app writes, with a deadline only as a guard.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from edgefuse.testing.mjpeg import MjpegServer
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.apps.test_service import App, jsonl_records, wait_until
from tests.full_disk import fill, tmpfs_fixture
from tests.needs import optional

pytestmark = pytest.mark.ort

av = optional("av")
ROOT = Path(__file__).resolve().parents[2]


full = tmpfs_fixture("full", "1m")
roomy = tmpfs_fixture("roomy", "16m")


@pytest.mark.parametrize("outputs", [("out.mp4", "out.jsonl"), ("out.avi",)],
                         ids=["pyav-and-jsonl", "opencv"])
def test_a_one_shot_run_onto_a_full_disk_exits_2_naming_the_file_and_leaves_nothing(
        full, detector_onnx, outputs):
    fill(full, leave=256 * 1024)  # the clip's annotated video needs about 820 kB
    flags = [flag for name in outputs
             for flag in (("--jsonl" if name.endswith(".jsonl") else "--save"), str(full / name))]
    done = subprocess.run(
        [sys.executable, "-m", "edgefuse", "detect", "--model", str(detector_onnx), "--source",
         str(SAMPLE_CLIP), *flags, "--backend", "cpu", "--threads", "1", "--stats-every", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    names = "|".join(re.escape(name) for name in outputs)
    assert re.search(rf"^error\[disk-full\]: cannot write '{re.escape(str(full))}/({names})': ",
                     done.stderr, re.M), done.stderr
    assert "df -h" in done.stderr and "Traceback" not in done.stderr
    assert "wrote" not in done.stdout
    assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no output, no temporary


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_live_run_keeps_going_on_a_full_disk_and_records_again_once_space_returns(
        tmp_path, roomy, detector_onnx):
    filler = fill(roomy)
    config = tmp_path / "live.yaml"
    config.write_text("segment_s: 0.5\n")
    video, log = roomy / "cam.mp4", roomy / "cam.jsonl"
    with MjpegServer(fps=50) as server:
        app = App(["--config", str(config), "--model", str(detector_onnx), "--source",
                   server.url, "--save", str(video), "--jsonl", str(log), "--serve", "0",
                   "--stats-every", "0"])
        try:
            url = app.wait_for_line(r"^live view: ").split()[-1]
            app.wait_for_line(r"jsonl: recording stopped: cannot write '.*cam\.jsonl': "
                              r"ENOSPC: No space left on device; inference, tracking and "
                              r"events go on")
            app.wait_for_line(r"video: recording stopped: cannot write '.*cam-\d{6}-\d{8}T\d{6}Z"
                              r"(-\d+)?\.mp4': ENOSPC")
            status, body = get(url + "healthz")
            health = json.loads(body)
            assert status == 200 and health["ok"], body  # a restart would free no space
            assert health["recording"] == {"stream0/jsonl": "disk-full",
                                           "stream0/video": "disk-full"}
            _, metrics = get(url + "metrics")
            assert re.search(r'^edgefuse_sink_errors_total\{reason="disk-full",sink="video",'
                             r'stream="stream0"\} [1-9]', metrics, re.M), metrics
            assert re.search(r'^edgefuse_sink_recording\{sink="jsonl",stream="stream0"\} 0\.0$',
                             metrics, re.M), metrics
            free = re.search(r'^edgefuse_disk_free_bytes\{path="' + re.escape(str(roomy))
                             + r'"\} (\S+)$', metrics, re.M)
            assert free and 0 <= float(free.group(1)) < 1 << 20, metrics
            _, state = get(url + "api/state")
            before = json.loads(state)["stream0"]["frames"]

            filler.unlink()  # space returns
            app.wait_for_line(r"stream0 jsonl: recording resumed after [\d.]+ s "
                              r"\(\d+ frame\(s\) not recorded\)")
            app.wait_for_line(r"stream0 video: recording resumed")
            segments = re.compile(r"cam-\d{6}-\d{8}T\d{6}Z(-\d+)?\.mp4")
            wait_until(lambda: any(segments.fullmatch(p.name) for p in roomy.iterdir()),
                       "a finished segment after the disk had room again")
            _, metrics = get(url + "metrics")
            assert re.search(r'^edgefuse_sink_recording\{sink="video",stream="stream0"\} 1\.0$',
                             metrics, re.M), metrics
            app.process.send_signal(signal.SIGTERM)
            code, stdout = app.finish()
        finally:
            app.kill()
    assert code == 0, "".join(app.stderr)
    assert re.search(r"^stream0 video: \d+ failed write\(s\) \(\d+ disk-full\), \d+ frame\(s\) "
                     r"not recorded, recording at the end$", stdout, re.M), stdout
    frames = [record["frame"] for record in jsonl_records(log) if "frame" in record]
    assert frames and frames[0] > before  # the frames inferred while the disk was full
    assert frames == sorted(frames)
    for segment in (p for p in roomy.iterdir() if segments.fullmatch(p.name)):
        with av.open(str(segment)) as container:
            assert sum(1 for _ in container.decode(video=0)) > 0
    assert [p.name for p in roomy.iterdir() if p.name.startswith(".")] == []
    assert "Traceback" not in "".join(app.stderr)
