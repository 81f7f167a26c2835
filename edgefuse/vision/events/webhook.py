"""Events to an HTTP webhook: one JSON POST per event, retried with backoff until accepted.

Why one request per event, in order: receivers (Home Assistant, Node-RED, a ticketing system) take
one object per call; a 2xx answer means delivered, anything else (a refused connection, a
timeout, a 5xx) keeps the event at the head of the outbox and retries after 1, 2, 4 ... 30 s, so
events arrive in order and at least once. A 4xx other than 408/429 means the receiver will never
take this event: it is dropped and counted as rejected rather than blocking the rest forever.
Plain ``urllib``: no dependency. With a ``journal`` the outbox spills to disk past its memory
bound and keeps what is undelivered across a restart (``Outbox``).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from edgefuse.errors import InputError, Ref
from edgefuse.vision.events.journal import EventJournal
from edgefuse.vision.events.outbox import Outbox

RETRY_AFTER = (408, 429)
MAX_BACKOFF_S = 30.0


class WebhookPublisher:
    def __init__(self, url: str, *, capacity: int = 10_000, timeout_s: float = 5.0,
                 headers: dict[str, str] | None = None,
                 journal: EventJournal | None = None) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(f"webhook URL {url!r} is not an http(s) URL",
                             hint="for example http://127.0.0.1:8123/api/webhook/cameras",
                             reference=Ref.BAD_CONFIG)
        self.url, self.timeout_s = url, timeout_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.outbox = Outbox(capacity, journal)
        self.delivered = self.rejected = 0
        self._stop = threading.Event()
        self._sender = threading.Thread(target=self._send_loop, name="edgefuse-webhook",
                                        daemon=True)
        self._sender.start()

    def publish(self, event: dict[str, Any]) -> None:
        self.outbox.put(event)

    def stats(self) -> dict[str, Any]:
        """``delivered`` (2xx) and the outbox's counts (``Outbox.counts``), the events the
        receiver refused for good among the dropped (``rejected``)."""
        counts = self.outbox.counts()
        if self.rejected:
            counts["dropped"]["rejected"] = self.rejected
        return {"delivered": self.delivered, **counts}

    def close(self, timeout: float = 5.0) -> int:
        """Deliver what is queued (up to ``timeout`` seconds), stop; the rest goes to the
        journal (or is counted as dropped without one). Returns how many were not delivered."""
        self.outbox.wait_empty(timeout)
        self._stop.set()
        self.outbox.close()
        self._sender.join(timeout)
        left = len(self.outbox)
        self.outbox.persist()
        return left

    def _send_loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            event = self.outbox.peek()
            if event is None:
                return
            outcome = self._post(event)
            if outcome == "retry":
                self._stop.wait(backoff)
                backoff = min(2 * backoff, MAX_BACKOFF_S)
                continue
            backoff = 1.0
            if outcome == "delivered":
                self.delivered += 1
            else:
                self.rejected += 1
            self.outbox.done(event)

    def _post(self, event: dict[str, Any]) -> str:
        request = urllib.request.Request(self.url, data=json.dumps(event).encode(),
                                         headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
            return "delivered"
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in RETRY_AFTER:
                return "rejected"
            return "retry"
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            return "retry"
