"""Retention of event media: the oldest files go first, beyond the age limit and beyond the
total size, and only files with event media names are ever touched."""

from __future__ import annotations

import os
import re

import pytest

from edgefuse.vision.media.retention import RetainedFolder, Retention

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0
HOUR, DAY = 3600.0, 86_400.0


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
    kept = RetainedFolder(tmp_path, Retention(max_age_s=48 * 3600), wall=lambda: NOW)
    assert kept.enforce() == [older, old]
    assert young.exists() and not old.exists() and not older.exists()


def test_the_oldest_go_until_the_total_is_within_max_mb(tmp_path):
    files = [_file(tmp_path, "gate", f"2027011{i}T080000.000Z-line_crossed-door-{i}", 400_000,
                   age_h=10 - i) for i in range(5)]
    kept = RetainedFolder(tmp_path, Retention(max_bytes=1_000_000), wall=lambda: NOW)
    assert kept.enforce() == files[:3]  # 2.0 MB -> 0.8 MB
    assert kept.total_bytes == 800_000
    newest = _file(tmp_path, "gate", "20270116T080000.000Z-line_crossed-door-9", 400_000, 0)
    assert kept.add(newest) == [files[3]]  # each write is checked at once
    assert sorted(p.name for p in (tmp_path / "gate").iterdir()) == [files[4].name, newest.name]


def test_files_that_are_not_event_media_are_never_counted_or_deleted(tmp_path):
    (tmp_path / "gate").mkdir()
    notes = tmp_path / "gate" / "notes.txt"
    notes.write_bytes(b"x" * 3_000_000)
    os.utime(notes, (0, 0))
    top = tmp_path / "20200101T000000.000Z-line_crossed-door-1.jpg"  # not in a stream folder
    top.write_bytes(b"x")
    os.utime(top, (0, 0))
    kept = RetainedFolder(tmp_path, Retention(max_bytes=1_000_000, max_age_s=3600),
                          wall=lambda: NOW)
    assert kept.enforce() == [] and notes.exists() and top.exists()


def test_a_file_written_before_the_clock_steps_from_1970_is_aged_by_the_monotonic_clock(
        tmp_path):
    """A board boots in 1970, writes a snapshot, then NTP steps its clock to today: the file is
    seconds old, not 56 years, and stays until it is max_age old on the monotonic clock."""
    mono, wall = [100.0], [86_400.0]  # 1970-01-02
    kept = RetainedFolder(tmp_path, Retention(max_age_s=3600), clock=lambda: mono[0],
                          wall=lambda: wall[0])
    early = _file(tmp_path, "gate", "19700102T000000.000Z-line_crossed-door-1", 10, 0)
    os.utime(early, (wall[0], wall[0]))
    assert kept.add(early) == []
    wall[0] = NOW  # NTP answered: the wall clock is 2027
    assert kept.enforce() == [] and early.exists()
    mono[0] += 3601
    assert kept.enforce() == [early]  # an hour later on the monotonic clock


def _rotated(folder, number, mtime):
    path = folder / f"out.jsonl.{number}"
    path.write_bytes(b"{}\n" * (10 + number))  # sizes apart: a rename keeps each one's own
    os.utime(path, (mtime, mtime))
    return path


def test_a_rescan_keeps_every_file_aged_on_the_monotonic_clock_while_the_wall_clock_steps(
        tmp_path):
    """Rotated JSON Lines are renamed (.1 to .2) and listed again: the files this run wrote and
    the file an earlier run left keep the ages the monotonic clock gives them, though the wall
    clock was stepped back an hour before the rescan, and a day's step forward after it deletes
    nothing young, a day's step back keeps nothing old.

    Ages by hand (max age 3600 s): A, an earlier run's, 3000 s old by its modification time
    when found at mono 1000; B written and added at mono 1000; C rotated at mono 1500."""
    mono, wall = [1000.0], [NOW]
    kept = RetainedFolder(tmp_path, Retention(max_age_s=3600), names=re.compile(r"out\.jsonl\.\d+"),
                          pattern="*", what="rotated JSON Lines", clock=lambda: mono[0],
                          wall=lambda: wall[0])
    a = _rotated(tmp_path, 3, NOW - 3000)
    kept.rescan()
    b = _rotated(tmp_path, 1, NOW)
    assert kept.add(b) == []

    mono[0], wall[0] = 1500.0, NOW + 500 - HOUR  # NTP stepped it back an hour meanwhile
    b = b.rename(tmp_path / "out.jsonl.2")  # a rotation: .1 to .2, the live file to .1
    c = _rotated(tmp_path, 1, wall[0])
    kept.rescan()
    assert [p.name for p in (a, b, c)] == ["out.jsonl.3", "out.jsonl.2", "out.jsonl.1"]

    wall[0] += DAY  # stepped forward a day: A 3500 s, B 500 s, C 0 s old
    assert kept.enforce() == []
    mono[0], wall[0] = 1700.0, wall[0] + 200 - 2 * DAY  # and back two: A 3700, B 700, C 200 s
    assert kept.enforce() == [a]
    mono[0] = 4601.0  # B 3601 s, C 3101 s
    assert kept.enforce() == [b]
    mono[0] = 5101.0  # C 3601 s
    assert kept.enforce() == [c] and not any(tmp_path.iterdir())


def test_a_file_found_ahead_of_a_clock_still_in_1970_counts_as_just_written(tmp_path):
    """An earlier run's snapshot, found while the clock is still in 1970 (its modification time
    is ahead of it): its age cannot be known, so it is kept max_age from then, not deleted at
    once when NTP steps the clock, nor kept for ever."""
    mono, wall = [50.0], [86_400.0]
    found = _file(tmp_path, "gate", "20270115T075000.000Z-line_crossed-door-1", 10, age_h=0)
    kept = RetainedFolder(tmp_path, Retention(max_age_s=3600), clock=lambda: mono[0],
                          wall=lambda: wall[0])
    wall[0] = NOW + DAY
    assert kept.enforce() == []
    mono[0] = 3651.0
    assert kept.enforce() == [found]
