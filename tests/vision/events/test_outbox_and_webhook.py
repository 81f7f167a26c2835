"""The outbox's bound and the webhook publisher against a local HTTP receiver."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from edgefuse.errors import InputError
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
    """Answers each POST with the next status of ``statuses`` (then 200), recording bodies."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses, self.bodies = list(statuses), []
        self.changed = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.changed:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.bodies.append((status, body))
                    receiver.changed.notify_all()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "1")
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


@pytest.mark.parametrize("status", [500, 429])
def test_webhook_retries_a_500_and_a_429_after_retry_after(status):
    """500 (the server failed) and 429 (too many requests, Retry-After) are passing: the event
    is sent again and delivered, never counted as rejected."""
    receiver = _Receiver([status])
    publisher = WebhookPublisher(receiver.url)
    publisher.publish({"n": 0})
    assert publisher.close(timeout=30) == 0
    receiver.shutdown()
    assert [(s, body["n"]) for s, body in receiver.bodies] == [(status, 0), (200, 0)]
    assert publisher.delivered == 1 and publisher.rejected == 0


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
