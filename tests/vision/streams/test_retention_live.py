"""Retention of a live run's outputs: the oldest finished segments and rotated JSON Lines go first
(by age, total, the disk's free space on a real small tmpfs), never the file being written; and
the ``retain:`` key's values and mistakes."""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

from edgefuse.apps import config
from edgefuse.apps.config import DetectionConfig
from edgefuse.errors import InputError
from edgefuse.vision.media.retention import Retention
from edgefuse.vision.streams.live_files import AppendedLines, Rotation
from edgefuse.vision.streams.sinks import VideoSink
from tests.full_disk import tmpfs_fixture
from tests.vision.streams.test_live_files import result

pytestmark = pytest.mark.unit


def test_rotated_json_lines_older_than_max_age_go_and_the_live_file_stays(tmp_path):
    path = tmp_path / "live.jsonl"
    lines = AppendedLines(path, Rotation(max_mb=100e-6, keep=10),  # rotates every 100 bytes
                          retain=Retention(max_age_s=3600))
    record = '{"frame": 0, "pad": "' + "x" * 60 + '"}\n'
    for _ in range(3):
        lines.write(record)  # live.jsonl, .1, .2
    old = time.time() - 2 * 3600
    for name in ("live.jsonl.1", "live.jsonl.2"):
        os.utime(tmp_path / name, (old, old))
    os.utime(path, (old, old))  # the file being written: never retention's, whatever its age
    lines.write(record)  # rotates: .1 -> .2, .2 -> .3 (both old), live -> .1 (old), then checks
    lines.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.jsonl"]
    assert path.read_text() == record


small = tmpfs_fixture("small", "2m")


def test_segments_make_room_oldest_first_so_a_small_disk_never_fills(small):
    floor = 1 << 20
    sink = VideoSink(small / "cam.mp4", segment_s=0.5, retain=Retention(min_free_bytes=floor))
    sink.start(fps=10, describe=lambda value: {})
    noise = np.random.default_rng(0)
    start = 1_700_000_000.0
    for index in range(200):  # 20 s of noise: about 4 MB of H.264, twice the disk
        image = noise.integers(0, 256, (96, 128, 3), np.uint8)
        sink.write(result(index, start + index / 10, mono=index / 10), image)
    sink.close()
    kept = {p.name for p in small.iterdir()}
    finished = [p.name for p in sink.segments]
    assert len(finished) == 40 and 0 < len(kept) < len(finished)
    assert kept == set(finished[-len(kept):])  # the newest: the oldest went first
    stat = os.statvfs(small)
    assert stat.f_bavail * stat.f_frsize >= floor - 200_000  # at most the segment written since


@pytest.mark.parametrize(("value", "expected"), [
    ({"max_bytes": "500M", "max_age": "7d", "min_free_bytes": "1G"},
     Retention(max_bytes=500 << 20, max_age_s=7 * 86400.0, min_free_bytes=1 << 30)),
    ({"max_bytes": 1000, "max_age": 90}, Retention(max_bytes=1000, max_age_s=90.0)),
    ({"max_age": "1.5h", "max_bytes": None}, Retention(max_age_s=5400.0))])
def test_retain_takes_bytes_and_seconds_with_systemds_units(value, expected):
    assert config.from_mapping(DetectionConfig, {"retain": value}, "c.yaml").retain == expected


@pytest.mark.parametrize(("value", "message"), [
    ({"max_bytes": "5X"}, r"'retain.max_bytes' must be a number or a number with one of the "
                          r"units B, K, M, G, T, got '5X'"),
    ({"max_age": "soon"}, r"'retain.max_age' must be a number or a number with one of the units"),
    ({"max_age": 0}, r"'retain.max_age' must be above 0 and finite, got 0"),
    ({"min_free_bytes": -1}, r"retain.min_free_bytes"),
    ({}, r"'retain' sets no limit"),
    ({"max_size": "1G"}, r"unknown key 'max_size'"),
    ("7d", r"retain")])
def test_a_bad_retain_names_the_key_and_the_file(value, message):
    with pytest.raises(InputError, match=message) as caught:
        config.from_mapping(DetectionConfig, {"retain": value}, "c.yaml")
    assert caught.value.reference == "bad-config" and "c.yaml" in caught.value.render()
    assert re.search(message, caught.value.render())


def test_a_disk_below_min_free_loses_every_rotated_file_but_never_the_live_one(tmp_path):
    path = tmp_path / "live.jsonl"
    lines = AppendedLines(path, Rotation(max_mb=100e-6, keep=10),
                          retain=Retention(min_free_bytes=1 << 60))  # never enough free
    record = '{"frame": 0, "pad": "' + "x" * 60 + '"}\n'
    for _ in range(4):
        lines.write(record)
    lines.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.jsonl"]
    assert path.read_text() == record
