"""Retention of event media: the oldest files go first, beyond the age limit and beyond the
total size, and only files with event media names are ever touched."""

from __future__ import annotations

import os

import pytest

from edgefuse.vision.media import retention
from edgefuse.vision.media.retention import RetainedFolder, Retention

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0


def _file(folder, stream, stem, size, age_h):
    path = folder / stream / f"{stem}.jpg"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (NOW - age_h * 3600, NOW - age_h * 3600))
    return path


def test_files_older_than_max_age_are_deleted_oldest_first(tmp_path):
    old = _file(tmp_path, "gate", "20270115T080000.000Z-line_crossed-door-1", 10, age_h=50)
    older = _file(tmp_path, "yard", "20270114T080000.000Z-zone_entered-bay-2", 10, age_h=70)
    young = _file(tmp_path, "gate", "20270117T080000.000Z-line_crossed-door-3", 10, age_h=1)
    kept = RetainedFolder(tmp_path, Retention(max_age_s=48 * 3600))
    assert kept.enforce(NOW) == [older, old]
    assert young.exists() and not old.exists() and not older.exists()


def test_the_oldest_go_until_the_total_is_within_max_mb(tmp_path):
    files = [_file(tmp_path, "gate", f"2027011{i}T080000.000Z-line_crossed-door-{i}", 400_000,
                   age_h=10 - i) for i in range(5)]
    kept = RetainedFolder(tmp_path, Retention(max_bytes=1_000_000))
    assert kept.enforce(NOW) == files[:3]  # 2.0 MB -> 0.8 MB
    assert kept.total_bytes == 800_000
    newest = _file(tmp_path, "gate", "20270116T080000.000Z-line_crossed-door-9", 400_000, 0)
    assert kept.add(newest, NOW) == [files[3]]  # each write is checked at once
    assert sorted(p.name for p in (tmp_path / "gate").iterdir()) == [files[4].name, newest.name]


def test_files_that_are_not_event_media_are_never_counted_or_deleted(tmp_path):
    (tmp_path / "gate").mkdir()
    notes = tmp_path / "gate" / "notes.txt"
    notes.write_bytes(b"x" * 3_000_000)
    os.utime(notes, (0, 0))
    top = tmp_path / "20200101T000000.000Z-line_crossed-door-1.jpg"  # not in a stream folder
    top.write_bytes(b"x")
    os.utime(top, (0, 0))
    kept = RetainedFolder(tmp_path, Retention(max_bytes=1_000_000, max_age_s=3600))
    assert kept.enforce(NOW) == [] and notes.exists() and top.exists()


def test_a_file_written_before_the_clock_steps_from_1970_is_aged_by_the_monotonic_clock(
        tmp_path, monkeypatch):
    """A board boots in 1970, writes a snapshot, then NTP steps its clock to today: the file is
    seconds old, not 56 years, and stays until it is max_age old on the monotonic clock."""
    mono = [100.0]
    kept = RetainedFolder(tmp_path, Retention(max_age_s=3600), clock=lambda: mono[0])
    with monkeypatch.context() as booted:
        booted.setattr(retention.time, "time", lambda: 86_400.0)  # 1970-01-02
        early = _file(tmp_path, "gate", "19700102T000000.000Z-line_crossed-door-1", 10, 0)
        assert kept.add(early) == []
    assert kept.enforce(NOW) == [] and early.exists()  # NTP answered: the wall clock is 2027
    mono[0] += 3601
    assert kept.enforce(NOW) == [early]  # an hour later on the monotonic clock
