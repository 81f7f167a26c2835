"""Events to an HTTP webhook: one JSON POST per event, retried with backoff until accepted.

Why one request per event, in order: receivers (Home Assistant, Node-RED, a ticketing system) take
one object per call; a 2xx answer means delivered, anything else (a refused connection, a
timeout, a 5xx) keeps the event at the head of the outbox and retries after 1, 2, 4 ... 30 s, so
events arrive in order and at least once. A 4xx other than 408/429 means the receiver will never
take this event: it is dropped and counted as rejected rather than blocking the rest forever.
Plain ``urllib``: no dependency. With a ``journal`` the outbox spills to disk past its memory
bound and keeps what is undelivered across a restart (``Outbox``).

Why ``Retry-After`` is honoured (RFC 9110 §10.2.3, with a 429 or a 503): a receiver that says
how long it needs (a rate limit, a restart) is not asked again sooner, which would only be
refused again, nor left waiting longer than it asked. Its two forms: a number of seconds, or an
HTTP-date, turned into seconds against the response's own ``Date`` (the receiver's clock, so a
board whose clock is still in 1970 waits what the receiver meant), else against this clock. The
wait is at most ``MAX_RETRY_AFTER_S`` (a receiver asking for hours must not hold events that
long; they wait in the outbox and its journal meanwhile) and runs on the monotonic clock
(``Event.wait``), so a clock step does not shorten or stretch it.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from edgefuse.errors import InputError, Ref
from edgefuse.vision.events.journal import EventJournal
from edgefuse.vision.events.outbox import Outbox

RETRY_AFTER = (408, 429)
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 300.0


def retry_after_s(value: str | None, date: str | None = None, *,
                  wall: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (0 for a date gone by, at most
    ``MAX_RETRY_AFTER_S``), or None where there is none or it cannot be read. ``date``: the
    response's ``Date`` header, the reference for an HTTP-date; else ``wall`` (the wall clock)."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    until = _http_date(value)
    if until is None:
        return None
    reference = _http_date(date) if date is not None else None
    if reference is None:
        reference = time.time() if wall is None else wall
    return min(max(0.0, until - reference), MAX_RETRY_AFTER_S)


def _http_date(value: str) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC, as HTTP-dates are (RFC 9110 §5.6.7)
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


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
            outcome, asked_s = self._post(event)
            if outcome == "retry":
                if asked_s is None:
                    self._stop.wait(backoff)
                    backoff = min(2 * backoff, MAX_BACKOFF_S)
                else:  # the receiver said how long
                    self._stop.wait(asked_s)
                continue
            backoff = 1.0
            if outcome == "delivered":
                self.delivered += 1
            else:
                self.rejected += 1
            self.outbox.done(event)

    def _post(self, event: dict[str, Any]) -> tuple[str, float | None]:
        """What became of ``event`` (delivered, rejected, retry) and, for a retry, the seconds
        the receiver's ``Retry-After`` asked for (None: it did not say)."""
        request = urllib.request.Request(self.url, data=json.dumps(event).encode(),
                                         headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
            return "delivered", None
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500 and exc.code not in RETRY_AFTER:
                return "rejected", None
            return "retry", retry_after_s(exc.headers.get("Retry-After"),
                                          exc.headers.get("Date"))
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            return "retry", None
