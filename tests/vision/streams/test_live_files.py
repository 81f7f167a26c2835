"""Outputs of live runs: JSON Lines visible as they are written and rotated, video in finished
segments, and what a crashed run left behind recovered or removed at the next start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from edgefuse.vision.streams.frames import Frame, FrameResult
from edgefuse.vision.streams.live_files import Rotation
from edgefuse.vision.streams.sinks import JsonlSink, VideoSink
from edgefuse.vision.streams.staging import Staged
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")


def result(index: int, at: float = 1_700_000_000.0, mono: float | None = None) -> FrameResult:
    """Frame ``index`` captured at the wall clock ``at`` and the monotonic clock ``mono``."""
    image = np.full((48, 64, 3), index % 256, np.uint8)
    return FrameResult(Frame(index, image, at, time.perf_counter() if mono is None else mono),
                       result=index)


def open_jsonl(path, **options) -> JsonlSink:
    sink = JsonlSink(path, **options)
    sink.start(fps=None, describe=lambda value: {"value": value})
    return sink


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_appended_records_are_visible_as_soon_as_written_and_kept_across_runs(tmp_path):
    path = tmp_path / "live.jsonl"
    sink = open_jsonl(path, append=True)
    sink.write(result(0), None)
    assert [r["frame"] for r in records(path)] == [0]  # no buffering until close
    sink.write(result(1), None)
    assert [r["frame"] for r in records(path)] == [0, 1]
    sink.close()
    again = open_jsonl(path, append=True)  # a restarted service appends
    again.write(result(2), None)
    again.close()
    assert [r["frame"] for r in records(path)] == [0, 1, 2]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_line_cut_by_a_crash_is_removed_when_the_file_is_opened_again(tmp_path, caplog):
    path = tmp_path / "live.jsonl"
    path.write_text('{"frame": 0}\n{"frame": 1}\n{"fra')
    sink = open_jsonl(path, append=True)
    sink.write(result(2), None)
    sink.close()
    assert [r["frame"] for r in records(path)] == [0, 1, 2]
    assert "removed a last line cut by an earlier crash (5 bytes)" in caplog.text


def test_rotation_keeps_the_newest_files_under_the_size_limit(tmp_path):
    path = tmp_path / "live.jsonl"
    line = len(json.dumps({"frame": 0}))
    sink = JsonlSink(path, append=True, rotate=Rotation(max_mb=1e-6 * 350, keep=2))
    sink.start(fps=None, describe=lambda value: {})
    written = []
    for index in range(40):
        sink.write(result(index), None)
        written.append(index)
    sink.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["live.jsonl", "live.jsonl.1", "live.jsonl.2"]
    sizes = [p.stat().st_size for p in tmp_path.iterdir()]
    assert max(sizes) <= 350 and line < 350
    # Newest in live.jsonl, then .1, then .2: together the last frames, in order, none lost.
    kept = [r["frame"] for name in ("live.jsonl.2", "live.jsonl.1", "live.jsonl")
            for r in records(tmp_path / name)]
    assert kept == written[-len(kept):] and len(kept) < len(written)


def test_a_file_source_jsonl_appears_only_when_closed_and_honours_the_umask(tmp_path):
    path = tmp_path / "out.jsonl"
    old = os.umask(0o027)
    try:
        sink = open_jsonl(path)
        sink.write(result(0), None)
        assert not path.exists()
        sink.close()
    finally:
        os.umask(old)
    assert [r["frame"] for r in records(path)] == [0]
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_crashed_runs_temporary_jsonl_is_recovered_and_its_video_removed(tmp_path, caplog):
    # A child process stages both outputs and dies with SIGKILL: its locks die with it.
    script = (
        "import os, sys\n"
        "from edgefuse.vision.streams.staging import Staged\n"
        "jsonl = Staged(sys.argv[1] + '/out.jsonl', '.tmp')\n"
        "jsonl.tmp.write_text('{\"frame\": 0}\\n{\"frame\": 1}\\n{\"fr')\n"
        "video = Staged(sys.argv[1] + '/out.mp4', '.mp4')\n"
        "video.tmp.write_bytes(b'no index yet')\n"
        "print('staged', flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False, env=_env())
    assert done.returncode == -9 and "staged" in done.stdout, done.stderr
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(".")]) == 2

    held = Staged(tmp_path / "out.jsonl", ".tmp")  # a run still writing: never touched
    JsonlSink(tmp_path / "out.jsonl").close()
    VideoSink(tmp_path / "out.mp4").close()
    recovered = [p for p in tmp_path.iterdir() if p.name.startswith("out.recovered-")]
    assert len(recovered) == 1 and recovered[0].suffix == ".jsonl"
    assert [r["frame"] for r in records(recovered[0])] == [0, 1]
    assert "an earlier run left unfinished" in caplog.text
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [held.tmp.name]
    held.discard()


def test_live_video_is_written_in_finished_playable_segments(tmp_path):
    sink = VideoSink(tmp_path / "cam.mp4", segment_s=1.0, keep=2)
    sink.start(fps=10, describe=lambda value: {})
    start = 1_700_000_000.0
    for index in range(35):  # 3.5 s of capture time at 10 fps: 3 finished segments and a part
        sink.write(result(index, start + index / 10, 500 + index / 10), result(index).frame.image)
        if index == 12:  # the first segment is finished and visible while the run goes on
            assert [p.name for p in sink.segments] == ["cam-000001-20231114T221320Z.mp4"]
    sink.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["cam-000003-20231114T221322Z.mp4",
                     "cam-000004-20231114T221323Z.mp4"]  # keep=2
    for name in names:
        capture = cv2.VideoCapture(str(tmp_path / name))
        frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        ok, image = capture.read()
        capture.release()
        assert ok and frames in (10, 5)
    assert [p.name for p in sink.segments][-2:] == names


def test_segments_survive_a_stepped_clock_in_order_and_numbered_on_across_restarts(tmp_path):
    """The wall clock steps back an hour, then forward a day, mid-run (NTP, an operator): each
    segment still lasts ``segment_s`` of the monotonic clock, every name is new, and ``keep``
    keeps the newest (by sequence number), not the ones whose wall-clock name sorts last."""
    start = 1_700_000_000.0
    sink = VideoSink(tmp_path / "cam.mp4", segment_s=1.0, keep=3)
    sink.start(fps=10, describe=lambda value: {})
    steps = {15: -3600.0, 32: 86400.0}  # frame index -> wall-clock step from then on
    offset = 0.0
    for index in range(45):  # 4.5 s of monotonic time: 4 finished segments and a part
        offset += steps.get(index, 0.0)
        sink.write(result(index, start + index / 10 + offset, 77.0 + index / 10),
                   result(index).frame.image)
    sink.close()
    finished = [p.name for p in sink.segments]
    assert len(finished) == 5 and len(set(finished)) == 5
    assert [name.split("-")[1] for name in finished] == ["000001", "000002", "000003",
                                                         "000004", "000005"]
    assert finished[2].endswith("T211322Z.mp4")  # the hour back shows in the name only
    assert sorted(p.name for p in tmp_path.iterdir()) == finished[-3:]  # the newest kept
    frames = [int(cv2.VideoCapture(str(tmp_path / name)).get(cv2.CAP_PROP_FRAME_COUNT))
              for name in finished[-3:]]
    assert frames == [10, 10, 5]

    again = VideoSink(tmp_path / "cam.mp4", segment_s=1.0, keep=3)  # a restart, clock back
    again.start(fps=10, describe=lambda value: {})
    again.write(result(0, start - 7200.0, 5.0), result(0).frame.image)
    again.close()
    assert again.segments[0].name.startswith("cam-000006-")
    assert sorted(p.name for p in tmp_path.iterdir()) == [*finished[-2:],
                                                          again.segments[0].name]


def _env() -> dict[str, str]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
