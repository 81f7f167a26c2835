"""The events' disk journal and the outbox over it: order, the bound, a torn tail, a restart."""

from __future__ import annotations

import pytest

from edgefuse.vision.events.journal import EventJournal, _frame
from edgefuse.vision.events.outbox import Outbox

pytestmark = pytest.mark.unit


def _event(n: int) -> dict:
    return {"type": "line_crossed", "stream": "gate", "n": n}


def _room_for(count: int) -> int:
    """Bytes for ``count`` records of the largest event these tests write."""
    return count * len(_frame(_event(999)))


def _drain(outbox: Outbox) -> list[int]:
    got = []
    while (event := outbox.peek(0)) is not None:
        got.append(event["n"])
        outbox.done(event)
    return got


def test_past_the_memory_bound_events_spill_to_disk_and_come_back_in_order(tmp_path):
    outbox = Outbox(3, EventJournal(tmp_path / "mqtt.journal", _room_for(100)))
    for n in range(10):
        outbox.put(_event(n))
    assert outbox.counts() == {"accepted": 10, "carried": 0, "queued": 10, "journalled": 7,
                               "dropped": {}}
    assert _drain(outbox) == list(range(10))
    assert (tmp_path / "mqtt.journal").stat().st_size == 0  # emptied once all were read


def test_a_restart_keeps_memory_and_journal_in_order(tmp_path, caplog):
    path = tmp_path / "mqtt.journal"
    first = Outbox(2, EventJournal(path, _room_for(100)))
    for n in range(6):
        first.put(_event(n))
    first.done(first.peek(0))  # 0 delivered
    first.close()
    assert first.persist() == 5
    assert first.persist() == 5 and not first.dropped  # closing twice changes nothing
    assert not caplog.records  # (nor claims a failed write)
    second = Outbox(2, EventJournal(path, _room_for(100)))
    assert second.carried == 5
    second.put(_event(6))
    assert _drain(second) == [1, 2, 3, 4, 5, 6]


def test_past_the_disk_bound_the_newest_are_dropped_and_counted(tmp_path):
    outbox = Outbox(2, EventJournal(tmp_path / "mqtt.journal", _room_for(3)))
    for n in range(10):
        outbox.put(_event(n))
    assert outbox.dropped_by == {"journal-full": 5}
    assert _drain(outbox) == [0, 1, 2, 3, 4]


def test_only_the_acknowledged_head_leaves_the_outbox(tmp_path):
    outbox = Outbox(2, EventJournal(tmp_path / "mqtt.journal", _room_for(10)))
    for n in range(4):
        outbox.put(_event(n))
    outbox.done(dict(outbox.peek(0)))  # an equal event, but not the one handed out
    assert len(outbox) == 4
    assert _drain(outbox) == [0, 1, 2, 3]


def test_a_torn_tail_is_cut_off_and_counted(tmp_path):
    path = tmp_path / "mqtt.journal"
    journal = EventJournal(path, _room_for(10))
    for n in range(3):
        assert journal.append(_event(n))
    journal.close()
    whole = path.read_bytes()
    path.write_bytes(whole + _frame(_event(3))[:-4])  # a crash in the middle of a write
    reopened = EventJournal(path, _room_for(10))
    assert (reopened.torn, len(reopened), path.read_bytes()) == (1, 3, whole)
    outbox = Outbox(5, reopened)
    assert outbox.dropped_by == {"journal-torn": 1}
    assert _drain(outbox) == [0, 1, 2]


def test_a_corrupt_record_ends_the_journal_and_counts_what_it_cut(tmp_path):
    path = tmp_path / "mqtt.journal"
    journal = EventJournal(path, _room_for(10))
    for n in range(4):
        journal.append(_event(n))
    journal.close()
    data = bytearray(path.read_bytes())
    data[len(_frame(_event(0))) + 20] ^= 0xFF  # a flipped bit in the second record's payload
    path.write_bytes(bytes(data))
    outbox = Outbox(5, EventJournal(path, _room_for(10)))
    assert outbox.dropped_by == {"journal-torn": 3}
    assert _drain(outbox) == [0]


def test_a_journal_that_cannot_be_written_counts_the_event(tmp_path, monkeypatch, caplog):
    journal = EventJournal(tmp_path / "mqtt.journal", _room_for(10))
    outbox = Outbox(1, journal)
    outbox.put(_event(0))

    def full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("edgefuse.vision.events.journal.os.write", full)
    outbox.put(_event(1))
    outbox.put(_event(2))
    assert outbox.dropped_by == {"journal-error": 2}
    monkeypatch.undo()
    outbox.put(_event(3))  # space came back
    monkeypatch.setattr("edgefuse.vision.events.journal.os.write", full)
    outbox.put(_event(4))  # and went again
    monkeypatch.undo()
    assert outbox.dropped_by == {"journal-error": 3}
    assert [r.getMessage().count("No space left") for r in caplog.records] == [1, 1]  # per outage
    assert _drain(outbox) == [0, 3]


def test_without_a_journal_what_is_left_at_exit_is_counted():
    outbox = Outbox(5)
    for n in range(3):
        outbox.put(_event(n))
    outbox.close()
    assert outbox.persist() == 0
    assert outbox.dropped_by == {"undelivered-at-exit": 3}
