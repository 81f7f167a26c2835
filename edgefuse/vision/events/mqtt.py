"""Events to an MQTT broker at QoS 1 (at least once), surviving broker restarts.

Topic layout: ``<prefix>/<stream>/<type>`` (``edgefuse/gate/line_crossed``), payload the event as
JSON (UTF-8). Subscribe to ``<prefix>/#`` for everything, ``<prefix>/+/zone_entered`` for one
kind from every camera.

Why a queue of our own in front of paho-mqtt: paho keeps unacknowledged QoS-1 messages only for
the life of one connection's session state and gives up on ``publish`` while disconnected; here
an event leaves the outbox only when the broker acknowledged it (PUBACK), so a broker restart,
a network cut or a slow start of the broker loses nothing up to the outbox's capacity (a
message in flight when the broker died is sent again: at least once, as QoS 1 promises).
paho's own loop thread reconnects with backoff (1 s doubling to 30 s). With a ``journal``
(``EventJournal``) the outbox spills past its memory bound to disk and keeps what is undelivered
across an app restart; the app then also starts while the broker is unreachable (a board that
boots before its broker, a service restarted during an outage) and sends once it answers. Without
one, an unreachable broker at start is a configuration error.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from edgefuse._deps import require
from edgefuse.errors import InputError, Ref
from edgefuse.vision.events.journal import EventJournal
from edgefuse.vision.events.outbox import Outbox

log = logging.getLogger(__name__)

PUBACK_WAIT_S = 5.0  # how long one publish waits for its PUBACK before it is sent again


class MqttPublisher:
    """Publishes events to ``host:port``; ``publish`` never blocks the caller."""

    def __init__(self, host: str, port: int = 1883, *, prefix: str = "edgefuse",
                 client_id: str | None = None, capacity: int = 10_000, keepalive: int = 30,
                 username: str | None = None, password: str | None = None,
                 connect_timeout_s: float = 10.0, journal: EventJournal | None = None) -> None:
        mqtt = require("paho.mqtt.client", extra="events", purpose="MQTT events")
        if not prefix or any(c in prefix for c in "#+"):
            raise InputError(f"MQTT topic prefix {prefix!r} is empty or has a wildcard",
                             reference=Ref.BAD_CONFIG)
        self.where = f"mqtt://{host}:{port}"
        self.prefix = prefix
        self.outbox = Outbox(capacity, journal)
        self.published = 0
        self._connected = threading.Event()
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or "")
        if username is not None:
            self._client.username_pw_set(username, password)
        self._client.reconnect_delay_set(min_delay=1, max_delay=30)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        try:
            self._client.connect(host, port, keepalive)
            reached = True
        except OSError as exc:
            if journal is None:
                raise InputError(f"cannot connect to the MQTT broker at {self.where}: {exc}",
                                 hint="check events.mqtt host and port, and that the broker "
                                 "runs", reference=Ref.BAD_CONFIG) from exc
            log.warning("events: the MQTT broker at %s is unreachable (%s); events wait in the "
                        "journal %s until it answers", self.where, exc, journal.path)
            self._client.connect_async(host, port, keepalive)
            reached = False
        self._client.loop_start()
        if reached and not self._connected.wait(connect_timeout_s):
            self._client.loop_stop()
            if journal is not None:
                journal.close()
            raise InputError(f"the MQTT broker at {self.where} accepted the TCP connection but "
                             f"did not accept the MQTT session within {connect_timeout_s:g} s",
                             hint="check the broker's log (authentication, client limits)",
                             reference=Ref.BAD_CONFIG)
        self._sender = threading.Thread(target=self._send_loop, name="edgefuse-mqtt",
                                        daemon=True)
        self._sender.start()

    @property
    def connected(self) -> bool:
        """Whether the MQTT session is up now (events queue while it is not)."""
        return self._connected.is_set()

    def publish(self, event: dict[str, Any]) -> None:
        self.outbox.put(event)

    def stats(self) -> dict[str, Any]:
        """``delivered`` (acknowledged) and the outbox's counts (``Outbox.counts``)."""
        return {"delivered": self.published, **self.outbox.counts()}

    def close(self, timeout: float = 5.0) -> int:
        """Deliver what is queued (up to ``timeout`` seconds while the broker is connected),
        disconnect; the rest goes to the journal (or is counted as dropped without one).
        Returns how many were not delivered."""
        if self._connected.is_set():
            self.outbox.wait_empty(timeout)
        self.outbox.close()
        self._sender.join(PUBACK_WAIT_S + 1.0)
        self._client.disconnect()
        self._client.loop_stop()
        left = len(self.outbox)
        self.outbox.persist()
        return left

    def _topic(self, event: dict[str, Any]) -> str:
        return f"{self.prefix}/{event.get('stream', 'stream0')}/{event.get('type', 'event')}"

    def _send_loop(self) -> None:
        while True:
            event = self.outbox.peek()
            if event is None:
                return
            if not self._connected.wait(1.0):
                continue
            info = self._client.publish(self._topic(event), json.dumps(event), qos=1)
            if info.rc != 0:  # not connected after all: wait for paho to reconnect
                continue
            try:
                info.wait_for_publish(PUBACK_WAIT_S)
            except (RuntimeError, ValueError):
                continue  # the connection dropped under it: send again once reconnected
            if info.is_published():
                self.published += 1
                self.outbox.done(event)

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if not reason_code.is_failure:
            self._connected.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self._connected.clear()
