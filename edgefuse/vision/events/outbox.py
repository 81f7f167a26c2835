"""A bounded, thread-safe queue of events waiting for delivery, oldest dropped first when full.

Why drop the oldest: a camera box that lost its broker for an hour must not grow without bound,
and when it comes back the recent events are the ones an operator acts on. Every drop is counted
(and exported as a metric), never silent.
"""

from __future__ import annotations

import collections
import threading
from typing import Any


class Outbox:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an outbox needs capacity >= 1, got {capacity}")
        self._items: collections.deque[dict[str, Any]] = collections.deque()
        self._capacity = capacity
        self._changed = threading.Condition()
        self._closed = False
        self.dropped = 0

    def put(self, event: dict[str, Any]) -> None:
        with self._changed:
            if len(self._items) >= self._capacity:
                self._items.popleft()
                self.dropped += 1
            self._items.append(event)
            self._changed.notify_all()

    def peek(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The oldest event, left in the queue (removed by ``done`` once delivered); None when
        closed and empty, or after ``timeout`` seconds with nothing."""
        with self._changed:
            self._changed.wait_for(lambda: self._items or self._closed, timeout)
            return self._items[0] if self._items else None

    def done(self, event: dict[str, Any]) -> None:
        """Remove ``event`` after delivery (unless it was dropped meanwhile)."""
        with self._changed:
            if self._items and self._items[0] is event:
                self._items.popleft()
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_empty(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: not self._items, timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        with self._changed:
            return len(self._items)
