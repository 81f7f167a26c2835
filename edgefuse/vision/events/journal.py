"""An append-only, fsynced file of events: where an outbox spills when its memory is full.

Why a file of framed records and no database: an event is written once, read once in order and
forgotten, so the cheapest durable shape is a log. Each record is ``MAGIC``, the payload's length
and its CRC-32 (``RECORD``, little-endian), then the event as JSON; a record is appended whole in
one ``write`` and flushed with ``fsync`` before ``append`` returns, so an event the outbox took
into its journal survives a crash, a power cut or an app restart. A crash in the middle of a
write leaves a torn tail: on opening, the first record whose header, length or checksum does not
hold ends the journal, the bytes from there are cut off and the records they held (at least one;
counted by the magics among them) are reported as ``torn``, never read as events.

Reading hands the records out oldest first from a cursor kept in memory; the file is emptied
(truncated) once every record has been read, and not before: a restart re-reads what was read
but not yet acknowledged (at least once, as the MQTT QoS 1 delivery it feeds). ``rewrite`` puts
events back in front of the unread ones (temp file, fsync, rename, fsync of the folder): the
outbox does it once, at close, with the events it still held in memory.

The bound is the file's size: ``append`` refuses (returns False) a record that would take it past
``max_bytes``; the outbox counts that event as dropped (``journal-full``). Dropping the newest
rather than the oldest keeps the file append-only (dropping the oldest would rewrite the card on
every event during an outage).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

MAGIC = b"EFJ1"
RECORD = struct.Struct("<4sII")  # magic, payload length, CRC-32 of the payload


class EventJournal:
    def __init__(self, path: str | os.PathLike[str], max_bytes: int) -> None:
        if max_bytes < RECORD.size + 2:
            raise ValueError(f"a journal needs max_bytes >= {RECORD.size + 2}, got {max_bytes}")
        self.path, self.max_bytes = Path(path), max_bytes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
        self._read_at = 0
        self._unread = 0
        self.torn = 0  # records cut off as a torn or corrupt tail when the journal was opened
        try:
            self._end = self._scan()
        except BaseException:
            os.close(self._fd)
            raise

    def __len__(self) -> int:
        """Records not read yet."""
        return self._unread

    def append(self, event: dict[str, Any]) -> bool:
        """Append ``event`` whole and fsync it; False (nothing written) when it would take the
        file past ``max_bytes``. Raises OSError when the write or the flush fails (the file is
        cut back to its last whole record first, so no half record stays behind)."""
        record = _frame(event)
        if self._end + len(record) > self.max_bytes:
            return False
        try:
            written = os.write(self._fd, record)
            if written != len(record):
                raise OSError(f"short write to {self.path}: {written} of {len(record)} bytes")
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, self._end)
            raise
        self._end += len(record)
        self._unread += 1
        return True

    def pop_oldest(self) -> dict[str, Any] | None:
        """The oldest unread event (None when every one was read); the file is emptied once
        the last is read."""
        if not self._unread:
            return None
        _, length, _ = RECORD.unpack(os.pread(self._fd, RECORD.size, self._read_at))
        payload = os.pread(self._fd, length, self._read_at + RECORD.size)
        self._read_at += RECORD.size + length
        self._unread -= 1
        if not self._unread:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
            self._read_at = self._end = 0
        return json.loads(payload)

    def rewrite(self, front: list[dict[str, Any]]) -> int:
        """Put ``front`` (in order) before the unread events, atomically; returns how many events
        did not fit under ``max_bytes`` and were left out (the newest first: the caller counts
        them as dropped)."""
        events = [*front, *(self.pop_oldest() for _ in range(self._unread))]
        records, size = [], 0
        for event in events:
            record = _frame(event)
            if size + len(record) > self.max_bytes:
                break
            records.append(record)
            size += len(record)
        temp = self.path.with_name(f".{self.path.name}.tmp")
        with open(temp, "wb") as out:
            out.write(b"".join(records))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._read_at, self._end, self._unread = 0, size, len(records)
        return len(events) - len(records)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _scan(self) -> int:
        """Count the whole records; cut off a torn tail. Returns the end of the last whole one."""
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        at = 0
        while at < len(data):
            if len(data) - at < RECORD.size:
                break
            magic, length, crc = RECORD.unpack_from(data, at)
            payload = data[at + RECORD.size:at + RECORD.size + length]
            if magic != MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
                break
            at += RECORD.size + length
            self._unread += 1
        if at < len(data):
            self.torn = max(1, data.count(MAGIC, at))
            os.ftruncate(self._fd, at)
            os.fsync(self._fd)
        return at


def _frame(event: dict[str, Any]) -> bytes:
    payload = json.dumps(event, separators=(",", ":")).encode()
    return RECORD.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload
