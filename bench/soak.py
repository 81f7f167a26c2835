"""A soak with faults: the detection app on N live cameras for a given time while cameras drop,
the broker restarts, the disk fills up, the service is hung up and the clock steps (issue 31 §6).

Setting: N MJPEG cameras (``edgefuse.testing.mjpeg``, serving the package's sample clip in a loop
at ``--fps``, each frame numbered) on 127.0.0.1, a real mosquitto on a free port, and a durable
MQTT subscriber in this process counting every event it receives (unique by content: QoS 1 may
deliver one twice). The app runs as a service would: ``edgefuse detect`` in a child process with
``sources:`` (reconnecting without limit), a counting line, MQTT events with a small memory bound
and an events journal, ``/metrics`` on 127.0.0.1 (scraped every ``--sample-s``), and its JSON
Lines, when ``--records``, on the same card as the journal. A hang-up or a crash is followed by a
restart, as systemd's ``Restart=`` does.

The card: a tmpfs of ``--disk-mb`` mounted for the run when this runs as root (a real ENOSPC);
otherwise a plain folder, and the disk-full fault is not injected (the table says so: no quota
trick stands in for it).

The clock: the app runs under libfaketime's ``LD_PRELOAD`` with ``FAKETIME_TIMESTAMP_FILE``,
whose offset this script steps (back an hour, forward a day, back to zero), the monotonic clock
left alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``) as an NTP step leaves it. A probe runs first: a
Python that sleeps, waits on an ``Event`` and reads the wall clock under that preload with the
clock an hour back. libfaketime 0.9.10 (Debian 12's package) fails it both ways (with
``DONT_FAKE_MONOTONIC=1`` every ``time.sleep`` raises EINVAL: its
``clock_nanosleep(TIMER_ABSTIME)`` wrapper shifts the monotonic deadline; without it
``Event.wait`` never returns); 0.9.12 (Debian sid's) passes, and ``.ci/libfaketime.sh`` builds it
where the machine's suite is older (``/usr/local/lib/faketime``, tried first; Debian 13's passes
the probe too but aborts a threaded Python now and then, see docs/soak.md). Where no library
passes, the fault is not injected and the table says why, rather than measuring libfaketime's
breakage as the app's.

Faults, in a cycle every ``--fault-every`` seconds: ``hangup`` (SIGHUP: the app stops cleanly and
is started again; at most ``--hangups`` times, in the first half of the run, so that the last run
of the app is long), ``camera-drop`` (one camera's server stops for
``--outage-s``, then serves again on its port), ``broker-restart`` (mosquitto stopped for
``--outage-s``), ``disk-full`` (the card filled to the last byte by a filler file for
``2 x --outage-s``, the broker stopped meanwhile so that events spill to the full journal) and
``clock-step``.

Reported (table + JSON): per app run its RSS after ``--warmup`` seconds and at its end (growth in
per cent), open files and threads at both; events emitted (the sum of each run's ``emitted``),
delivered (as the subscriber counts them, and as the app counts acknowledgements), dropped by
reason, left queued in the journal at the end; the accounting ``emitted = delivered + dropped +
queued``; frames the cameras sent against frames the app processed, and the frames lost by cause
(the app's stale drops, and every ``edgefuse_*_total`` counter of errors the app exports), the rest
being frames in flight at a stop or sent into a dying connection.

    python -m bench.soak --streams 2 --minutes 20
    python -m bench.soak --streams 1 --minutes 2 --fault-every 10

Prints a table and writes bench/results/soak.json (``--out`` elsewhere), the app's output of every
run next to it (soak.log).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench._harness import RESULTS, ROOT
from bench.live_latency import clip_frames
from edgefuse.testing.mjpeg import MjpegServer

FAULTS = ("hangup", "camera-drop", "broker-restart", "disk-full", "clock-step")
LINE = "{name: middle, start: [160, 0], end: [160, 240], margin: 2, anchor: center}"
SUMMARY = re.compile(r"events mqtt: (\d+) emitted(?: \(and (\d+) from the last run's journal\))?, "
                     r"(\d+) delivered, (\d+) queued \((\d+) in the journal\), (\d+) dropped"
                     r"(?: \((.*)\))?")
CLOCK_STEPS = ("-3600", "+86400", "+0")  # back an hour, forward a day, back to true time


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen | None = None, timeout: float = 30.0
                   ) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"exited with {process.returncode} before listening") from None
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


class Broker:
    """mosquitto with persistence (the subscriber's durable session survives its restarts)."""

    def __init__(self, folder: Path) -> None:
        self.port, self.config = free_port(), folder / "mosquitto.conf"
        user = "user root\n" if os.geteuid() == 0 else ""
        self.config.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                               f"persistence true\npersistence_location {folder}/\n{user}")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.process = subprocess.Popen([binary, "-c", str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


class Subscriber:
    """Counts the events under ``soak/#``: unique ones, duplicates, and per stream whether they
    came in order of their time."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt  # noqa: PLC0415 - the events extra, needed here only
        self.unique: set[bytes] = set()
        self.received = self.duplicates = 0
        self.subscribed = threading.Event()
        self._lock = threading.Lock()
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"soak-{port}",
                                   clean_session=False)
        self._client.reconnect_delay_set(min_delay=1, max_delay=2)
        self._client.on_connect = lambda client, *_: client.subscribe("soak/#", qos=1)
        self._client.on_subscribe = lambda *_: self.subscribed.set()
        self._client.on_message = self._message
        self._client.connect("127.0.0.1", port)
        self._client.loop_start()
        if not self.subscribed.wait(20):
            raise RuntimeError("the soak's subscriber was not subscribed within 20 s")

    def _message(self, client, userdata, message) -> None:
        with self._lock:
            self.received += 1
            if message.payload in self.unique:
                self.duplicates += 1
            self.unique.add(message.payload)

    def count(self) -> int:
        with self._lock:
            return len(self.unique)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@dataclasses.dataclass
class AppRun:
    """One start of the app: its samples, what ended it and its summary's event counts."""

    pid: int
    started: float
    ready: float | None = None  # when every stream's first frame was processed

    @property
    def startup_s(self) -> float:
        return (self.ready or time.monotonic()) - self.started
    samples: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    ended_by: str = ""
    exit_code: int | None = None
    events: dict[str, Any] | None = None


class App:
    """``edgefuse detect`` as a service runs it, restarted after each stop."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.command, self.env, self.log = command, env, log
        self.process: subprocess.Popen | None = None
        self.runs: list[AppRun] = []
        self._stdout = log.with_suffix(".stdout")

    def start(self, serve_port: int, streams: int, timeout: float = 300.0) -> None:
        """Start the app and wait until every stream delivered a frame (the model loaded and
        the cameras read), so that no fault lands in its start-up."""
        self._stdout.write_text("")
        with open(self.log, "ab") as err, open(self._stdout, "wb") as out:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=out, stderr=err,
                                            cwd=ROOT)
        run = AppRun(self.process.pid, time.monotonic())
        self.runs.append(run)
        deadline = run.started + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            metrics = scrape(serve_port, per_stream=True)
            if metrics and sum(1 for key in metrics if key.startswith("edgefuse_frames_total{")
                               and metrics[key] > 0) >= streams:
                run.ready = time.monotonic()
                return
            time.sleep(0.5)

    def stop(self, how: signal.Signals, why: str) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(how)
        self.finished(why, self.process.wait(60))

    def finished(self, why: str, code: int) -> None:
        run = self.runs[-1]
        run.ended_by, run.exit_code = why, code
        match = SUMMARY.search(self._stdout.read_text())
        if match:
            emitted, carried, delivered, queued, journalled, dropped, reasons = match.groups()
            run.events = {"emitted": int(emitted), "carried": int(carried or 0),
                          "delivered": int(delivered), "queued": int(queued),
                          "journalled": int(journalled), "dropped": int(dropped),
                          "reasons": dict((r.rsplit(" ", 1)[0], int(r.rsplit(" ", 1)[1]))
                                          for r in reasons.split(", ")) if reasons else {}}
        with open(self.log, "ab") as err:
            err.write(self._stdout.read_bytes())


def proc_sample(pid: int) -> dict[str, Any] | None:
    """RSS (kB), threads and open files of ``pid`` from /proc; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields:  # exited, not yet reaped
        return None
    return {"t": time.monotonic(), "rss_kb": int(fields["VmRSS"].split()[0]),
            "threads": int(fields["Threads"]), "fds": fds}


def scrape(port: int, *, per_stream: bool = False) -> dict[str, float] | None:
    """``/metrics`` summed over labels but ``reason`` (``name`` or ``name{reason}``), or with
    ``per_stream`` over labels but ``stream`` (``name{stream}``)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^(edgefuse_\w+)(\{[^}]*\})? ([-+0-9.eE]+|NaN)$", line)
        if not match or match.group(3) == "NaN":
            continue
        name, labels = match.group(1), match.group(2) or ""
        reason = re.search(r'stream="([^"]*)"' if per_stream else r'reason="([^"]*)"', labels)
        key = f"{name}{{{reason.group(1)}}}" if reason else name
        totals[key] = totals.get(key, 0.0) + float(match.group(3))
    return totals


LIBFAKETIMES = ("/usr/local/lib/faketime/libfaketimeMT.so.1",  # .ci/libfaketime.sh's build
                "/usr/lib/*/faketime/libfaketimeMT.so.1")  # Debian's package


def faketime_env(clock_file: Path) -> tuple[dict[str, str] | None, str]:
    """The preload that steps the app's wall clock through ``clock_file``, or None and why not
    (not installed, or every library found failing the probe: see the module docstring)."""
    found = [path for pattern in LIBFAKETIMES for path in sorted(glob.glob(pattern))]
    if not found:
        return None, "libfaketime is not installed (bash .ci/libfaketime.sh)"
    failures = []
    for library in found:
        env = {"LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": str(clock_file),
               "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        failed = probe_faketime(env, clock_file)
        if not failed:
            return env, ""
        failures.append(f"{library} ({failed})")
    return None, (f"libfaketime breaks a Python's waits with the clock stepped: "
                  f"{'; '.join(failures)}, so the app would measure libfaketime, not the step "
                  f"(.ci/libfaketime.sh builds one that passes)")


def probe_faketime(env: dict[str, str], clock_file: Path) -> str:
    """Why a Python under ``env`` cannot sleep, wait and see the wall clock an hour back, or ''."""
    clock_file.write_text("-3600\n")
    probe = ("import threading, time; time.sleep(0.05); threading.Event().wait(0.05); "
             "print(round(time.time()))")
    try:
        done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env},
                              capture_output=True, text=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return "Event.wait never returned"
    finally:
        clock_file.write_text("+0\n")
    if done.returncode:
        return f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
    if abs(int(done.stdout) - (time.time() - 3600)) > 60:
        return f"the wall clock not stepped back an hour (read {done.stdout.strip()})"
    return ""


@contextlib.contextmanager
def card(folder: Path, size_mb: int):
    """A tmpfs of ``size_mb`` at ``folder`` when root can mount one (True), else the plain
    folder (False)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)],
        capture_output=True, check=False).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte; the filler file to remove."""
    filler = folder / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 16, 4096, 512, 1):  # the last partial blocks too
            with contextlib.suppress(OSError):  # ENOSPC: full, which is the point
                while True:
                    os.write(descriptor, b"\0" * size)
    finally:
        os.close(descriptor)
    return filler


def soak(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="edgefuse-soak-", dir=args.work))
    frames = clip_frames()
    cameras = [MjpegServer(fps=args.fps, size=frames[0].shape[:2],
                           scene=lambda n: frames[n % len(frames)]) for _ in range(args.streams)]
    for camera in cameras:
        camera.start()
    broker = Broker(work)
    broker.start()
    subscriber = Subscriber(broker.port)
    clock_file = work / "faketime.rc"
    faketime, no_faketime = (faketime_env(clock_file) if args.clock_steps
                             else (None, "--no-clock-steps"))
    with card(work / "card", args.disk_mb) as real_disk:
        state, out = work / "card" / "state", work / "card" / "out"
        out.mkdir(parents=True, exist_ok=True)
        serve = free_port()
        sources = "\n".join(f"  - {{name: cam{i}, url: '{camera.url}', reconnect: "
                            f"{{attempts: null, backoff_s: 0.5, max_backoff_s: 2}}}}"
                            for i, camera in enumerate(cameras))
        config = work / "soak.yaml"
        config.write_text(
            f"sources:\n{sources}\nlines:\n  - {LINE}\n"
            f"events:\n  mqtt: {{host: 127.0.0.1, port: {broker.port}, prefix: soak, "
            f"capacity: {args.capacity}}}\n"
            f"  journal: {{dir: '{state / 'events'}', max_mb: {args.journal_kb / 1000}}}\n"
            f"serve: 127.0.0.1:{serve}\n"
            + (f"jsonl: '{out}/{{name}}.jsonl'\njsonl_rotate: {{max_mb: 1, keep: 2}}\n"
               if args.records else ""))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if faketime:
            env.update(faketime)
        app = App([sys.executable, "-m", "edgefuse", "detect", "--config", str(config),
                   "--model", args.model, "--backend", "cpu", "--threads", "1",
                   "--stats-every", "0"], env, work / "app.log")
        injected: dict[str, int] = dict.fromkeys(FAULTS, 0)
        harness_errors: list[str] = []
        skipped = {}
        if not real_disk:
            skipped["disk-full"] = "not root: no tmpfs to fill (no quota trick stands in)"
        if not faketime:
            skipped["clock-step"] = no_faketime
        app.start(serve, args.streams)
        start = time.monotonic()
        end = start + args.minutes * 60  # pushed back by each restart's start-up: the soak's
        # minutes are minutes of the app running under faults, not of its model loading
        next_fault, cycle, hangups = start + args.fault_every, 0, 0
        try:
            while time.monotonic() < end:
                sample = proc_sample(app.process.pid)
                if app.process.poll() is not None:  # crashed: restarted, as systemd does
                    app.finished("crash", app.process.returncode)
                    app.start(serve, args.streams)
                    end += app.runs[-1].startup_s
                    continue
                if sample is not None:
                    app.runs[-1].samples.append(sample)
                metrics = scrape(serve)
                if metrics is not None:
                    app.runs[-1].metrics = metrics
                if time.monotonic() >= next_fault:
                    late = time.monotonic() > start + (end - start) / 2
                    enabled = [f for f in FAULTS if f not in skipped and not (
                        f == "hangup" and (hangups >= args.hangups or late))]
                    fault = enabled[cycle % len(enabled)]
                    cycle += 1
                    try:
                        inject(fault, args, cameras=cameras, broker=broker, app=app,
                               card_dir=work / "card", clock_file=clock_file, cycle=cycle,
                               serve=serve)
                    except (OSError, RuntimeError) as exc:  # the harness's, not the app's
                        harness_errors.append(f"{fault}: {exc}")
                    injected[fault] += 1
                    if fault == "hangup":
                        hangups += 1
                        end += app.runs[-1].startup_s
                    next_fault = time.monotonic() + args.fault_every
                time.sleep(args.sample_s)
            final = scrape(serve)
            if final is not None:
                app.runs[-1].metrics = final
            app.stop(signal.SIGTERM, "end")
            delivered_seen = settle(subscriber, app)
        finally:
            if app.process is not None and app.process.poll() is None:
                app.process.kill()
            subscriber.close()
            broker.stop()
            for camera in cameras:
                camera.stop()
            shutil.copy(work / "app.log", args.out.with_suffix(".log"))
        result = report(args, app, cameras, subscriber, delivered_seen, injected, skipped,
                        real_disk, faketime)
        result["harness_errors"] = harness_errors
    shutil.rmtree(work, ignore_errors=True)
    return result


def inject(fault: str, args: argparse.Namespace, *, cameras: list[MjpegServer], broker: Broker,
           app: App, card_dir: Path, clock_file: Path, cycle: int, serve: int) -> None:
    """One fault, undone before returning (the hang-up: the app started again)."""
    if fault == "camera-drop":
        camera = cameras[cycle % len(cameras)]
        camera.stop()
        time.sleep(args.outage_s)
        camera.start()
    elif fault == "broker-restart":
        broker.stop()
        time.sleep(args.outage_s)
        broker.start()
    elif fault == "disk-full":
        broker.stop()
        filler = fill(card_dir)
        time.sleep(2 * args.outage_s)
        filler.unlink()
        broker.start()
    elif fault == "clock-step":
        for step in CLOCK_STEPS:
            clock_file.write_text(step + "\n")
            time.sleep(args.outage_s / len(CLOCK_STEPS))
    elif fault == "hangup":
        app.stop(signal.SIGHUP, "hangup")
        app.start(serve, args.streams)


def settle(subscriber: Subscriber, app: App, timeout: float = 30.0) -> int:
    """Wait until the subscriber has every event the app counted as delivered (or ``timeout``)."""
    delivered = sum(run.events["delivered"] for run in app.runs if run.events)
    deadline = time.monotonic() + timeout
    while subscriber.count() < delivered and time.monotonic() < deadline:
        time.sleep(0.1)
    return subscriber.count()


def growth(run: AppRun, warmup_s: float) -> dict[str, Any] | None:
    """RSS, threads and open files ``warmup_s`` after the run was ready and at its end."""
    if run.ready is None:
        return None
    after = [s for s in run.samples if s["t"] >= run.ready + warmup_s]
    if len(after) < 2:
        return None
    first, last = after[0], after[-1]
    return {"seconds": round(last["t"] - first["t"], 1), "rss_mb": [round(first["rss_kb"] / 1024,
            1), round(last["rss_kb"] / 1024, 1)],
            "rss_growth_pct": round(100 * (last["rss_kb"] / first["rss_kb"] - 1), 2),
            "rss_max_mb": round(max(s["rss_kb"] for s in after) / 1024, 1),
            "threads": [first["threads"], last["threads"]], "fds": [first["fds"], last["fds"]]}


def report(args, app: App, cameras: list[MjpegServer], subscriber: Subscriber, seen: int,
           injected: dict[str, int], skipped: dict[str, str], real_disk: bool,
           faketime: dict[str, str] | None) -> dict[str, Any]:
    for run in app.runs:  # a run that crashed printed no summary: its last /metrics instead
        if run.events is None and run.metrics:
            reasons = {key[len("edgefuse_events_dropped_total{"):-1]: int(value)
                       for key, value in run.metrics.items()
                       if key.startswith("edgefuse_events_dropped_total{")}
            run.events = {"emitted": int(run.metrics.get("edgefuse_events_emitted_total", 0)),
                          "delivered": int(run.metrics.get("edgefuse_events_delivered_total", 0)),
                          "queued": int(run.metrics.get("edgefuse_events_queued", 0)),
                          "dropped": sum(reasons.values()), "reasons": reasons,
                          "from": "its last /metrics (it crashed: no summary)"}
    summaries = [run.events for run in app.runs if run.events]
    emitted = sum(s["emitted"] for s in summaries)
    dropped: dict[str, int] = {}
    for summary in summaries:
        for reason, count in summary["reasons"].items():
            dropped[reason] = dropped.get(reason, 0) + count
    queued = summaries[-1]["queued"] if summaries else 0
    processed = sum(run.metrics.get("edgefuse_frames_total", 0) for run in app.runs)
    lost = {"stale (live source kept the newest)":
            sum(run.metrics.get("edgefuse_dropped_frames_total", 0) for run in app.runs)}
    for run in app.runs:
        for name, value in run.metrics.items():
            if name.endswith("_total") and "error" in name:
                lost[name] = lost.get(name, 0) + value
    sent = sum(camera.next_number for camera in cameras)
    return {
        "setting": {"streams": args.streams, "minutes": args.minutes, "fps": args.fps,
                    "capacity": args.capacity, "journal_kb": args.journal_kb,
                    "records": args.records, "fault_every_s": args.fault_every,
                    "outage_s": args.outage_s,
                    "disk": f"tmpfs {args.disk_mb} MB" if real_disk else "plain folder",
                    "clock": f"libfaketime ({faketime['LD_PRELOAD']})" if faketime
                    else "real"},
        "faults": injected, "faults_not_injected": skipped,
        "runs": [{"pid": run.pid, "ended_by": run.ended_by, "exit_code": run.exit_code,
                  "startup_s": round(run.startup_s, 1), "memory": growth(run, args.warmup),
                  "events": run.events}
                 for run in app.runs],
        "events": {"emitted": emitted, "delivered_seen": seen,
                   "delivered_acked": sum(s["delivered"] for s in summaries),
                   "duplicates_seen": subscriber.duplicates, "dropped": dropped,
                   "queued_at_end": queued,
                   "accounted": emitted == seen + sum(dropped.values()) + queued},
        "frames": {"sent": sent, "processed": int(processed),
                   "lost_by_cause": {k: int(v) for k, v in lost.items()},
                   "in_flight_at_stops_or_unaccounted": int(sent - processed
                                                            - sum(lost.values()))},
    }


def render(result: dict[str, Any]) -> str:
    s, ev, fr = result["setting"], result["events"], result["frames"]
    lines = [f"\nsoak: {s['streams']} stream(s), {s['minutes']} min, {s['fps']} fps, disk "
             f"{s['disk']}, clock {s['clock']}",
             "faults injected: " + ", ".join(f"{k} {v}" for k, v in result["faults"].items())]
    lines += [f"  not injected: {k}: {why}" for k, why in result["faults_not_injected"].items()]
    lines += [f"  harness error: {error}" for error in result.get("harness_errors", [])]
    lines.append(f"\n{'run':<4} {'ended by':<9} {'exit':>4} {'start s':>7} {'s':>6} "
                 f"{'RSS MB':>13} "
                 f"{'growth':>7} {'threads':>8} {'fds':>8} {'emitted':>7} {'deliv':>6} "
                 f"{'dropped':>7}")
    for index, run in enumerate(result["runs"]):
        memory, events = run["memory"] or {}, run["events"] or {}
        rss = memory.get("rss_mb", ["-", "-"])
        lines.append(
            f"{index:<4} {run['ended_by']:<9} {run['exit_code']!s:>4} {run['startup_s']:>7} "
            f"{memory.get('seconds', '-')!s:>6} {f'{rss[0]} -> {rss[1]}':>13} "
            f"{str(memory.get('rss_growth_pct', '-')) + ' %':>7} "
            f"{'->'.join(map(str, memory.get('threads', []))) or '-':>8} "
            f"{'->'.join(map(str, memory.get('fds', []))) or '-':>8} "
            f"{events.get('emitted', '-')!s:>7} {events.get('delivered', '-')!s:>6} "
            f"{events.get('dropped', '-')!s:>7}")
    lines.append(f"\nevents: {ev['emitted']} emitted = {ev['delivered_seen']} delivered (as the "
                 f"subscriber counts them; {ev['delivered_acked']} acknowledged, "
                 f"{ev['duplicates_seen']} duplicates) + {sum(ev['dropped'].values())} dropped "
                 f"{ev['dropped'] or ''} + {ev['queued_at_end']} queued in the journal: "
                 f"{'accounted for' if ev['accounted'] else 'NOT ACCOUNTED FOR'}")
    lines.append(f"frames: {fr['sent']} sent by the cameras, {fr['processed']} processed; lost "
                 "by cause: " + ", ".join(f"{k} {v}" for k, v in fr["lost_by_cause"].items())
                 + f"; in flight at stops or unaccounted {fr['in_flight_at_stops_or_unaccounted']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--fps", type=float, default=10.0)
    parser.add_argument("--model", default="shapes_yolov8")
    parser.add_argument("--capacity", type=int, default=2, help="events in memory per publisher")
    parser.add_argument("--journal-kb", type=float, default=4.0, help="the events journal's bound")
    parser.add_argument("--disk-mb", type=int, default=16, help="the card's size (tmpfs)")
    parser.add_argument("--fault-every", type=float, default=20.0, help="seconds between faults")
    parser.add_argument("--outage-s", type=float, default=6.0, help="how long a fault lasts")
    parser.add_argument("--hangups", type=int, default=2, help="SIGHUP restarts at most")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds after the app is ready before RSS counts")
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--records", action=argparse.BooleanOptionalAction, default=True,
                        help="JSON Lines on the card too")
    parser.add_argument("--clock-steps", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    parser.add_argument("--work", type=Path, default=None,
                        help="where the run's folder goes (default: the system's temp folder)")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = soak(args)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    print(f"\nwrote {args.out}")
    return 0 if result["events"]["accounted"] else 1


if __name__ == "__main__":
    sys.exit(main())
