"""Events to a real mosquitto broker: order, QoS 1 across a broker restart, a refused broker."""

from __future__ import annotations

import time

import pytest

from edgefuse.errors import InputError
from edgefuse.vision.events import mqtt as mqtt_events
from edgefuse.vision.events.journal import EventJournal, _frame
from edgefuse.vision.events.mqtt import MqttPublisher
from tests.needs import optional
from tests.vision.events.broker import Broker, SilentBroker, Subscriber, free_port

pytestmark = pytest.mark.unit
optional("paho.mqtt.client")


@pytest.fixture
def broker(tmp_path):
    running = Broker(tmp_path)
    running.start()
    yield running
    running.stop()


@pytest.fixture
def closing():
    """Closes what a test opened even when it fails: no MQTT thread outlives its test."""
    opened = []
    yield opened.append
    for client in reversed(opened):
        client.close(timeout=1) if isinstance(client, MqttPublisher) else client.close()


def _event(n: int, stream: str = "gate") -> dict:
    return {"type": "line_crossed", "stream": stream, "time": 1.0 + n, "n": n}


def _numbers(messages) -> set[int]:
    return {payload["n"] for _, payload in messages}


def test_events_arrive_in_order_under_their_topics(broker, closing):
    subscriber = Subscriber(broker.port, "edgefuse/#")
    closing(subscriber)
    subscriber.wait_subscribed()
    publisher = MqttPublisher("127.0.0.1", broker.port)
    closing(publisher)
    for n in range(5):
        publisher.publish(_event(n, stream="gate" if n % 2 else "yard"))
    assert publisher.close() == 0
    assert subscriber.wait_for(lambda m: len(m) >= 5)
    subscriber.close()
    assert [p["n"] for _, p in subscriber.messages] == [0, 1, 2, 3, 4]
    assert subscriber.messages[0][0] == "edgefuse/yard/line_crossed"
    assert subscriber.messages[1][0] == "edgefuse/gate/line_crossed"


def test_a_broker_restart_loses_no_event(broker, closing):
    subscriber = Subscriber(broker.port, "edgefuse/#")
    closing(subscriber)
    subscriber.wait_subscribed()
    publisher = MqttPublisher("127.0.0.1", broker.port)
    closing(publisher)
    for n in range(3):
        publisher.publish(_event(n))
    assert subscriber.wait_for(lambda m: _numbers(m) >= {0, 1, 2})
    broker.stop()
    deadline = time.monotonic() + 30  # wait for the publisher to see the broker gone
    while publisher.connected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not publisher.connected
    for n in range(3, 8):  # the broker is away: these wait in the outbox
        publisher.publish(_event(n))
    broker.start()  # the subscriber's durable session queues what arrives before it is back
    assert subscriber.wait_for(lambda m: _numbers(m) >= set(range(8)), timeout=60)
    assert publisher.close() == 0
    subscriber.close()
    assert publisher.outbox.dropped == 0


def _first_seen(messages) -> list[int]:
    """Event numbers in the order they first arrived (QoS 1 may deliver one twice)."""
    seen: dict[int, None] = {}
    for _, payload in messages:
        seen.setdefault(payload["n"], None)
    return list(seen)


def test_a_broker_gone_across_an_app_restart_delivers_or_counts_every_event(broker, closing,
                                                                           tmp_path):
    """The broker stops; more events than the memory bound follow; the app restarts (a new
    publisher on the same journal, the broker still away) and emits past the disk bound; the
    broker comes back: what the subscriber got, in order, plus what was counted as dropped is
    every event emitted."""
    subscriber = Subscriber(broker.port, "edgefuse/#")
    closing(subscriber)
    subscriber.wait_subscribed()
    path, room = tmp_path / "state" / "mqtt.journal", 20 * len(_frame(_event(99)))
    first = MqttPublisher("127.0.0.1", broker.port, capacity=4,
                          journal=EventJournal(path, room))
    closing(first)
    for n in range(3):
        first.publish(_event(n))
    assert subscriber.wait_for(lambda m: _numbers(m) >= {0, 1, 2})
    broker.stop()
    for n in range(3, 15):  # 12 events, three times the memory bound
        first.publish(_event(n))
    assert first.close(timeout=0) >= 12  # the app stops with the broker away
    assert path.stat().st_size > 0 and first.outbox.dropped == 0
    second = MqttPublisher("127.0.0.1", broker.port, capacity=4,  # starts without a broker
                           journal=EventJournal(path, room))
    closing(second)
    assert not second.connected and second.outbox.carried >= 12
    for n in range(15, 60):  # past the journal's 20 records
        second.publish(_event(n))
    dropped = second.outbox.dropped_by
    assert set(dropped) == {"journal-full"} and dropped["journal-full"] > 0
    broker.start()
    expected = 60 - second.outbox.dropped
    assert subscriber.wait_for(lambda m: len(_numbers(m)) >= expected, timeout=60)
    assert second.close() == 0
    subscriber.close()
    delivered = _first_seen(subscriber.messages)
    assert delivered == sorted(delivered)  # in order
    assert delivered[:15] == list(range(15))  # nothing from before the restart was lost
    assert len(delivered) + first.outbox.dropped + second.outbox.dropped == 60
    assert second.stats()["queued"] == 0


def test_a_broker_that_refuses_the_connection_is_a_clear_error():
    with pytest.raises(InputError, match=r"cannot connect to the MQTT broker at mqtt://127.0.0.1"):
        MqttPublisher("127.0.0.1", free_port())


def test_a_wildcard_prefix_is_refused():
    with pytest.raises(InputError, match="has a wildcard"):
        MqttPublisher("127.0.0.1", 1, prefix="cams/#")


def test_an_event_the_broker_never_acknowledged_is_neither_counted_nor_dropped(monkeypatch,
                                                                              closing):
    """No PUBACK: the event stays queued (at least once) and is sent again; nothing is counted
    as published, and at exit it is counted as undelivered, not lost silently."""
    monkeypatch.setattr(mqtt_events, "PUBACK_WAIT_S", 0.2)
    silent = SilentBroker()
    publisher = MqttPublisher("127.0.0.1", silent.port)
    try:
        publisher.publish(_event(0))
        assert silent.wait_for(lambda topics: len(topics) >= 2), silent.publishes  # sent again
        assert silent.publishes[:2] == ["edgefuse/gate/line_crossed"] * 2
        assert publisher.published == 0 and len(publisher.outbox) == 1
        assert publisher.close(timeout=0) == 1  # still waiting for delivery, not lost
        assert publisher.outbox.dropped_by == {"undelivered-at-exit": 1}
    finally:
        silent.close()
