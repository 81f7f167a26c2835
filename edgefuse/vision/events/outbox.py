"""A bounded, thread-safe queue of events waiting for delivery; with a journal, it spills to disk.

Without a journal the oldest event is dropped when the memory bound is reached: a camera box that
lost its broker for an hour must not grow without bound, and the recent events are the ones an
operator acts on. With a journal (``EventJournal``) nothing is dropped at the memory bound: the
events past it are appended, fsynced, to the journal, and come back into memory in order as the
head is delivered, so a broker gone for an hour loses nothing up to the journal's size, and an app
restart loses nothing at all (``persist`` writes what memory still holds in front of the journal's
records at close; the next run reads them first). Order holds because memory always holds the
oldest events: once anything is in the journal, new events go behind it there.

Every event dropped is counted with its reason (``dropped_by``): ``outbox-full`` (no journal,
memory full: the oldest), ``journal-full`` (the journal at its ``max_bytes``: the newest),
``journal-error`` (the journal could not be written or read: the disk failed or is full),
``journal-torn`` (records of a torn tail found when the journal was opened, after a crash),
``undelivered-at-exit`` (no journal, still queued when the app closed). An event leaves the
outbox only through ``done`` with that very event at the head: the publisher calls it once the
receiver acknowledged it, so nothing unacknowledged is ever removed.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from edgefuse.vision.events.journal import EventJournal

log = logging.getLogger(__name__)


class Outbox:
    def __init__(self, capacity: int, journal: EventJournal | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"an outbox needs capacity >= 1, got {capacity}")
        self._items: collections.deque[dict[str, Any]] = collections.deque()
        self._capacity = capacity
        self._journal = journal
        self._changed = threading.Condition()
        self._closed = False
        self._persisted = False
        self._failing = False  # the journal's last write failed
        self.dropped_by: collections.Counter[str] = collections.Counter()
        self.accepted = 0  # events put, dropped ones included
        self.carried = len(journal) if journal is not None else 0  # left by the last run
        if journal is not None:
            self._drop("journal-torn", journal.torn)
            self._refill()

    @property
    def dropped(self) -> int:
        """Events dropped, whatever the reason."""
        with self._changed:
            return sum(self.dropped_by.values())

    def counts(self) -> dict[str, Any]:
        """``accepted``, ``carried`` (from the last run's journal), ``queued`` (memory and
        journal), ``journalled``, ``dropped`` by reason: at any moment accepted + carried =
        delivered + dropped + queued, the ``journal-torn`` drops aside (the last run's events,
        cut off before they could be carried)."""
        with self._changed:
            journalled = len(self._journal) if self._journal is not None else 0
            return {"accepted": self.accepted, "carried": self.carried,
                    "queued": len(self._items) + journalled, "journalled": journalled,
                    "dropped": dict(self.dropped_by)}

    def put(self, event: dict[str, Any]) -> None:
        with self._changed:
            self.accepted += 1
            if self._journal is None:
                if len(self._items) >= self._capacity:
                    self._items.popleft()
                    self._drop("outbox-full")
                self._items.append(event)
            elif len(self._items) < self._capacity and not len(self._journal):
                self._items.append(event)
            else:
                self._spill(event)
            self._changed.notify_all()

    def peek(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The oldest event, left in the queue (removed by ``done`` once delivered); None when
        closed, or after ``timeout`` seconds with nothing."""
        with self._changed:
            self._changed.wait_for(lambda: self._items or self._closed, timeout)
            return self._items[0] if self._items and not self._closed else None

    def done(self, event: dict[str, Any]) -> None:
        """Remove ``event`` after delivery, only if it is the head (not when it was dropped or
        persisted meanwhile); the journal's next event takes its place in memory."""
        with self._changed:
            if self._items and self._items[0] is event:
                self._items.popleft()
                self._refill()
            self._changed.notify_all()

    def close(self) -> None:
        """No event is handed out any more (``peek`` returns None); call ``persist`` next."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def persist(self) -> int:
        """At exit: what memory holds goes in front of the journal's records (none lost), or,
        without a journal, is counted as ``undelivered-at-exit``. Returns the events kept for the
        next run (a second call changes nothing)."""
        with self._changed:
            if self._persisted:
                return len(self._journal) if self._journal is not None else 0
            self._persisted = True
            held = list(self._items)
            self._items.clear()
            if self._journal is None:
                self._drop("undelivered-at-exit", len(held))
                return 0
            try:
                self._drop("journal-full", self._journal.rewrite(held))
            except OSError as exc:
                log.error("events: could not write %d event(s) to the journal %s at exit: %s",
                          len(held), self._journal.path, exc)
                self._drop("journal-error", len(held))
            kept = len(self._journal)
            self._journal.close()
            return kept

    def wait_empty(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._items, timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Events waiting, in memory and in the journal."""
        with self._changed:
            return len(self._items) + (len(self._journal) if self._journal is not None else 0)

    def _spill(self, event: dict[str, Any]) -> None:
        try:
            if not self._journal.append(event):
                self._drop("journal-full")
            self._failing = False
        except OSError as exc:
            if not self._failing:  # one line per outage of the disk, not one per event
                log.error("events: cannot write to the journal %s (%s): events past the "
                          "memory bound are dropped until it can", self._journal.path, exc)
            self._failing = True
            self._drop("journal-error")

    def _refill(self) -> None:
        """Move the journal's oldest events into memory while there is room."""
        while (self._journal is not None and len(self._journal)
               and len(self._items) < self._capacity):
            try:
                event = self._journal.pop_oldest()
            except (OSError, ValueError) as exc:  # the card failed under it: memory only now
                lost = len(self._journal)
                log.error("events: cannot read the journal %s (%s): %d event(s) dropped, the "
                          "outbox keeps to memory from now on", self._journal.path, exc, lost)
                self._drop("journal-error", lost)
                self._journal.close()
                self._journal = None
                return
            self._items.append(event)

    def _drop(self, reason: str, count: int = 1) -> None:
        if count:
            self.dropped_by[reason] += count
