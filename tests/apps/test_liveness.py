"""One liveness: systemd's watchdog pets exactly while ``/healthz`` answers 200, both asking the
run's ``LiveState``; a fake systemd listens on an abstract unix socket, and each step waits for
the datagram it expects."""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from edgefuse.apps.systemd import Notifier, Watch, stall_s
from edgefuse.vision.serve.server import LiveServer
from edgefuse.vision.serve.state import LiveState
from tests.needs import optional

pytestmark = pytest.mark.unit
DEADLINE_S = 30.0


class _Pipeline:
    """What ``Watch`` reads of a run: it has read a frame, it is not stopping."""

    def __init__(self) -> None:
        self.first_frame = threading.Event()
        self.first_frame.set()
        self.stopping = False
        self.frames_done = 0


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "healthz", timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_watchdog_pets_exactly_while_healthz_says_ok():
    optional("aiohttp")
    name = f"edgefuse-test-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind("\0" + name)
    listener.settimeout(DEADLINE_S)

    def next_message() -> list[str]:
        return listener.recv(4096).decode().split("\n")

    def wait_for(field: str) -> list[str]:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = next_message()
            if any(line.startswith(field) for line in message):
                return message
        raise AssertionError(f"no {field} within {DEADLINE_S} s")

    state = LiveState(["gate", "yard"], stall_s=3600)
    server = LiveServer(state, "127.0.0.1", 0)
    server.start()
    notifier = Notifier("\0" + name, watchdog_s=0.2)
    try:
        with Watch(notifier, _Pipeline(), state):
            wait_for("READY=1")
            assert _health(server.url) == 200
            wait_for("WATCHDOG=1")
            state.source_state("yard", "down")
            assert _health(server.url) == 503
            assert "STATUS=unhealthy: yard reconnecting" in wait_for("STATUS=unhealthy")
            for _ in range(3):  # while unhealthy, nothing but the status
                assert "WATCHDOG=1" not in next_message()
            state.source_state("yard", "up")
            state.frame("yard", b"jpeg")
            assert _health(server.url) == 200
            wait_for("WATCHDOG=1")
    finally:
        server.stop()
        listener.close()


def test_a_stall_stops_the_pets_before_systemds_deadline():
    short, long = Notifier("\0unused", watchdog_s=0.4), Notifier("\0unused", watchdog_s=60.0)
    try:
        assert stall_s(short, 10.0) == 0.2
        assert stall_s(long, 10.0) == 10.0
        assert stall_s(None, 10.0) == 10.0
    finally:
        short.close()
        long.close()


def test_the_watchdog_is_petted_every_half_watchdogsec():
    """WatchdogSec 1 s: pets at most ~0.5 s apart (sd_watchdog_enabled(3): half the interval,
    so one late pet never lets systemd's deadline pass), and never more often."""
    name = f"edgefuse-test-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind("\0" + name)
    listener.settimeout(DEADLINE_S)
    state = LiveState(["gate"], stall_s=3600)
    pets: list[float] = []
    try:
        with Watch(Notifier("\0" + name, watchdog_s=1.0), _Pipeline(), state):
            while len(pets) < 4:
                if "WATCHDOG=1" in listener.recv(4096).decode().split("\n"):
                    pets.append(time.monotonic())
    finally:
        listener.close()
    gaps = [later - earlier for earlier, later in zip(pets, pets[1:], strict=False)]
    assert min(gaps) >= 0.45, gaps  # not more often than half the interval
    assert min(gaps) < 0.75, gaps  # a full interval between pets is one late pet from a kill


def test_a_watchdog_meant_for_another_process_is_not_ours():
    """WATCHDOG_PID names the process systemd watches: another PID means no watchdog here."""
    base = {"NOTIFY_SOCKET": "@edgefuse-unused", "WATCHDOG_USEC": "4000000"}
    ours = Notifier.from_environment({**base, "WATCHDOG_PID": str(os.getpid())})
    theirs = Notifier.from_environment({**base, "WATCHDOG_PID": str(os.getpid() + 1)})
    unnamed = Notifier.from_environment(base)
    try:
        assert ours.watchdog_s == 4.0 and unnamed.watchdog_s == 4.0
        assert theirs is not None and theirs.watchdog_s is None
    finally:
        for notifier in (ours, theirs, unnamed):
            notifier.close()
