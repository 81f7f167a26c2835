"""A real MQTT broker (Debian's mosquitto) on 127.0.0.1 for tests, and a subscriber to it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Broker:
    """mosquitto on a free port; ``stop``/``start`` restart it on the same port."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not Path(binary).exists():
            if os.environ.get("CI"):
                raise RuntimeError("CI must install mosquitto (apt-get install mosquitto)")
            pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
        self.binary, self.port = binary, free_port()
        self.config = workdir / "mosquitto.conf"
        # persistence: a durable subscriber's session (and the QoS-1 messages queued for it)
        # survives a restart, whichever of publisher and subscriber reconnects first
        # (started as root, mosquitto drops to its own user unless told not to, and could then
        # not write its database into this test's folder)
        as_root = "user root\n" if os.geteuid() == 0 else ""
        self.config.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                               f"persistence true\npersistence_location {workdir}/\n{as_root}")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([self.binary, "-c", str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # ready when it accepts connections
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"mosquitto exited: {self.process.stderr.read()!r}") from None
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start listening within 20 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


class Subscriber:
    """Collects every message under ``topic``: a durable session (clean_session off), so the
    broker keeps what is published while this subscriber is away."""

    def __init__(self, port: int, topic: str) -> None:
        import paho.mqtt.client as mqtt
        self.messages: list[tuple[str, dict]] = []
        self._changed = threading.Condition()
        self._subscribed = threading.Event()
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                   client_id=f"edgefuse-test-{port}", clean_session=False)
        self._client.reconnect_delay_set(min_delay=1, max_delay=2)

        def on_connect(client, userdata, flags, reason_code, properties):
            client.subscribe(topic, qos=1)

        def on_subscribe(client, userdata, mid, reason_codes, properties):
            self._subscribed.set()

        def on_message(client, userdata, message):
            with self._changed:
                self.messages.append((message.topic, json.loads(message.payload)))
                self._changed.notify_all()

        self._client.on_connect, self._client.on_message = on_connect, on_message
        self._client.on_subscribe = on_subscribe
        self._client.connect("127.0.0.1", port)
        self._client.loop_start()

    def wait_subscribed(self) -> None:
        if not self._subscribed.wait(20):
            raise RuntimeError("the test subscriber was not subscribed within 20 s")
        self._subscribed.clear()

    def wait_for(self, predicate, timeout: float = 30.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.messages), timeout)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


class SilentBroker:
    """A broker that accepts the MQTT session (CONNACK, PINGRESP) but never acknowledges a
    PUBLISH (no PUBACK): what a client sees when the broker dies between receiving a message
    and storing it. ``publishes`` lists the topic of each PUBLISH received, in order."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(4)
        self.port = self._server.getsockname()[1]
        self.publishes: list[str] = []
        self._changed = threading.Condition()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            while True:
                packet = _read_packet(connection)
                if packet is None:
                    return
                kind, body = packet
                if kind == 0x10:  # CONNECT -> CONNACK, session accepted
                    connection.sendall(b"\x20\x02\x00\x00")
                elif kind == 0xC0:  # PINGREQ -> PINGRESP
                    connection.sendall(b"\xd0\x00")
                elif kind == 0x30:  # PUBLISH: noted, never acknowledged
                    topic_length = int.from_bytes(body[:2], "big")
                    with self._changed:
                        self.publishes.append(body[2:2 + topic_length].decode())
                        self._changed.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.publishes), timeout)

    def close(self) -> None:
        self._server.close()


def _read_packet(connection: socket.socket) -> tuple[int, bytes] | None:
    """(packet type, the rest after the fixed header) of the next MQTT packet; None at EOF."""
    first = connection.recv(1)
    if not first:
        return None
    length, shift = 0, 0
    while True:  # the remaining length: 7 bits a byte, the top bit says more follow
        byte = connection.recv(1)
        if not byte:
            return None
        length |= (byte[0] & 0x7F) << shift
        shift += 7
        if not byte[0] & 0x80:
            break
    body = b""
    while len(body) < length:
        chunk = connection.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return first[0] & 0xF0, body
