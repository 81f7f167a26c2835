"""The outbox's bound and the webhook publisher against a local HTTP receiver."""

from __future__ import annotations

import email.utils
import http.server
import json
import threading
import time

import pytest

from edgefuse.errors import InputError
from edgefuse.vision.events import webhook
from edgefuse.vision.events.journal import EventJournal
from edgefuse.vision.events.outbox import Outbox
from edgefuse.vision.events.webhook import WebhookPublisher

pytestmark = pytest.mark.unit


def test_a_full_outbox_drops_the_oldest_and_counts_it():
    outbox = Outbox(3)
    for n in range(5):
        outbox.put({"n": n})
    assert outbox.dropped == 2
    first = outbox.peek(0)
    assert first == {"n": 2}
    outbox.done(first)
    assert len(outbox) == 2


def test_done_removes_only_the_event_delivered_not_whatever_is_at_the_head():
    """The sender took event 0; meanwhile the full outbox dropped it for newer ones. Its
    delivery must not remove event 1, which nobody sent yet."""
    outbox = Outbox(2)
    outbox.put({"n": 0})
    sending = outbox.peek(0)
    outbox.put({"n": 1})
    outbox.put({"n": 2})  # full: event 0 dropped
    assert outbox.dropped == 1
    outbox.done(sending)
    assert len(outbox) == 2
    assert outbox.peek(0) == {"n": 1}


class _Receiver(http.server.ThreadingHTTPServer):
    """Answers each POST with the next status of ``statuses`` (then 200), recording bodies and
    when each came (monotonic). A status may come with headers: ``(429, {"Retry-After": "2"})``
    (a callable value is called then)."""

    def __init__(self, statuses: list[int | tuple[int, dict]]) -> None:
        self.statuses, self.bodies, self.times = list(statuses), [], []
        self.changed = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.changed:
                    answer = receiver.statuses.pop(0) if receiver.statuses else 200
                    status, headers = answer if isinstance(answer, tuple) else (answer, {})
                    receiver.bodies.append((status, body))
                    receiver.times.append(time.monotonic())
                    receiver.changed.notify_all()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value() if callable(value) else value)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


def test_webhook_retries_a_server_error_and_keeps_the_order():
    receiver = _Receiver([503])
    publisher = WebhookPublisher(receiver.url)
    for n in range(3):
        publisher.publish({"type": "zone_entered", "n": n})
    assert publisher.close(timeout=30) == 0
    receiver.shutdown()
    assert [(status, body["n"]) for status, body in receiver.bodies] == [
        (503, 0), (200, 0), (200, 1), (200, 2)]
    assert publisher.delivered == 3 and publisher.rejected == 0


def _retried_once(answer: int | tuple[int, dict]) -> _Receiver:
    """One event to a receiver that gives ``answer`` first, then 200: delivered within 30 s at
    the second try, never rejected; the receiver, stopped, with what it saw."""
    receiver = _Receiver([answer])
    publisher = WebhookPublisher(receiver.url)
    publisher.publish({"n": 0})
    with receiver.changed:
        assert receiver.changed.wait_for(lambda: len(receiver.bodies) == 2, 30)
    assert publisher.close(timeout=30) == 0
    receiver.shutdown()
    assert publisher.delivered == 1 and publisher.rejected == 0
    return receiver


@pytest.mark.parametrize("status", [500, (429, {"Retry-After": "1"})])
def test_webhook_retries_a_500_and_a_429_after_retry_after(status):
    """500 (the server failed) and 429 (too many requests, Retry-After) are passing: the event
    is sent again and delivered, never counted as rejected."""
    receiver = _retried_once(status)
    status = status[0] if isinstance(status, tuple) else status
    assert [(s, body["n"]) for s, body in receiver.bodies] == [(status, 0), (200, 0)]


def _http_date(seconds_from_now: float = 0.0) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize("answer", [
    (429, {"Retry-After": "2"}),
    # an HTTP-date 2 s after the receiver's own Date (whole seconds: 2 s apart, 3 s where a
    # second ends between the two)
    (503, {"Date": lambda: _http_date(), "Retry-After": lambda: _http_date(2)}),
], ids=["seconds", "http-date"])
def test_webhook_waits_what_retry_after_asks_not_its_own_1_s_backoff(answer):
    """The receiver asks for 2 s; the publisher's own first backoff is 1 s: the event comes
    again no sooner than the receiver asked."""
    receiver = _retried_once(answer)
    assert [(s, body["n"]) for s, body in receiver.bodies] == [(answer[0], 0), (200, 0)]
    assert receiver.times[1] - receiver.times[0] >= 1.9


def test_webhook_waits_at_most_max_retry_after_s(monkeypatch):
    """A receiver asking for an hour gets the cap (here 0.2 s), not an hour."""
    monkeypatch.setattr(webhook, "MAX_RETRY_AFTER_S", 0.2)
    receiver = _retried_once((429, {"Retry-After": "3600"}))
    assert [s for s, _ in receiver.bodies] == [429, 200]


def test_retry_after_reads_seconds_and_http_dates_and_refuses_the_rest():
    """RFC 9110 §10.2.3's two forms, by hand: 21 Oct 2015 07:28:00 UTC is 1445412480."""
    assert webhook.retry_after_s("120") == 120.0
    assert webhook.retry_after_s(" 7 ") == 7.0
    assert webhook.retry_after_s("86400") == webhook.MAX_RETRY_AFTER_S
    at = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert webhook.retry_after_s(at, "Wed, 21 Oct 2015 07:27:30 GMT") == 30.0
    assert webhook.retry_after_s(at, wall=1445412470.0) == 10.0  # no Date: this clock
    assert webhook.retry_after_s(at, "Wed, 21 Oct 2015 07:29:00 GMT") == 0.0  # gone by
    # a board whose clock is in 1970 waits what the receiver meant, by the receiver's Date
    assert webhook.retry_after_s(at, "Wed, 21 Oct 2015 07:27:55 GMT", wall=86400.0) == 5.0
    for unreadable in (None, "", "soon", "-5", "1.5", "\u00b2"):
        assert webhook.retry_after_s(unreadable) is None


def test_webhook_drops_an_event_the_receiver_rejects_and_goes_on():
    receiver = _Receiver([400])
    publisher = WebhookPublisher(receiver.url)
    publisher.publish({"n": 0})
    publisher.publish({"n": 1})
    assert publisher.close(timeout=30) == 0
    receiver.shutdown()
    assert [(status, body["n"]) for status, body in receiver.bodies] == [(400, 0), (200, 1)]
    assert publisher.rejected == 1 and publisher.delivered == 1


def test_webhook_events_wait_in_the_journal_across_a_restart(tmp_path):
    """A receiver that fails every call; the app stops with the events spilled to the journal;
    the next run, with the receiver healthy, delivers them first and in order."""
    failing = _Receiver([503] * 1000)
    path = tmp_path / "webhook.journal"
    first = WebhookPublisher(failing.url, capacity=2, journal=EventJournal(path, 10_000))
    for n in range(6):
        first.publish({"type": "zone_entered", "n": n})
    with failing.changed:
        assert failing.changed.wait_for(lambda: failing.bodies, 30)  # it was tried
    assert first.close(timeout=0) == 6
    failing.shutdown()
    assert first.stats() == {"delivered": 0, "accepted": 6, "carried": 0, "queued": 6,
                             "journalled": 6, "dropped": {}}  # all of them are on disk
    healthy = _Receiver([])
    second = WebhookPublisher(healthy.url, capacity=2, journal=EventJournal(path, 10_000))
    second.publish({"type": "zone_entered", "n": 6})
    assert second.close(timeout=30) == 0
    healthy.shutdown()
    assert [body["n"] for _, body in healthy.bodies] == list(range(7))
    assert second.stats()["carried"] == 6 and second.delivered == 7


def test_a_webhook_url_that_is_not_http_is_refused():
    with pytest.raises(InputError, match="is not an http"):
        WebhookPublisher("ftp://example/hook")
