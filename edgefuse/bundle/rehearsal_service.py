"""The installed service started in the root as its unit says, and watched like a health probe.

Why a drop-in for the source: the packaged config reads the board's camera (``source: 0``), which
a root under qemu does not have. On a board, ``systemctl edit SERVICE`` writes a drop-in that
replaces ``ExecStart=`` to change what the service reads; the rehearsal writes the same drop-in
(``/etc/systemd/system/SERVICE.service.d/zz-edgefuse-rehearsal.conf``): the unit's command line
plus ``--source`` with the package's sample clip (made by ``edgefuse.vision.scenes``) and
``--max-frames`` (the frames a step needs: under emulation each costs up to a second, and the
clip's 150 frames four times over took minutes of a CI run), and ``--jsonl`` where the config has
no JSON Lines sink. It is written again from the unit before each
start, so a newer release's command line is the one that runs.

Why the JSON Lines as the health check: every finished frame is one record, so records prove
that frames flow through source, model and sinks, and their timestamps give the app's frames per
second under emulation (not a board figure). A live source appends them as they come: once
MEASURE_FRAMES arrived the service is stopped as systemd stops it (SIGTERM, then
``TimeoutStopSec=``) and must exit 0. The clip is a file, whose records the app writes to a
temporary file renamed into place when the clip ends: there the service exits 0 by itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from edgefuse.bundle.rehearsal_root import plain_environment
from edgefuse.bundle.unit_file import (
    UNITS,
    ServiceUnit,
    drop_in,
    environment,
    make_directories,
    read_unit,
    shell_command,
)
from edgefuse.errors import InputError, Ref
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP

DROP_IN = "zz-edgefuse-rehearsal.conf"
CLIP = "/var/tmp/edgefuse-rehearsal/clip.mp4"
HEALTH_FRAMES = 10  # records that make a service healthy
MEASURE_FRAMES = 30  # records the frame rate is measured over before the stop
START_TIMEOUT_S = 600.0  # emulated imports and the first frame can take minutes on a busy host
POLL_S = 0.5
DEFAULT_STOP_S = 90.0  # systemd's DefaultTimeoutStopSec
# what systemd counts as a clean exit of a service: 0 or death by SIGHUP, SIGINT, SIGTERM, SIGPIPE
CLEAN_EXITS = (0, -signal.SIGHUP, -signal.SIGINT, -signal.SIGTERM, -signal.SIGPIPE)
_BACKEND_LINE = re.compile(r"^(\S+): \S+ on (\w+); source ", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ServiceRun:
    frames: int
    fps: float | None
    backend: str | None
    exit_code: int | None
    stopped_by: str  # "SIGTERM", "itself", "SIGKILL"
    healthy: bool
    why: str  # what went wrong, empty when healthy
    seconds: float
    user: str | None
    log: Path


def put_clip(root: Path) -> None:
    """The sample clip at CLIP in the root, readable by any service user."""
    target = root / CLIP.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    target.write_bytes(SAMPLE_CLIP.read_bytes())
    target.chmod(0o644)


def prepared_unit(root: Path, name: str, frames: int, unit_text: str | None = None,
                  locate: Callable[[str], Path] | None = None) -> tuple[ServiceUnit, str]:
    """The unit with the rehearsal's drop-in written from its current command line (reading
    ``frames`` of the clip), and the JSON Lines file (root-relative) its frames are appended to."""
    drop_ins = root / UNITS / f"{name}.d"
    (drop_ins / DROP_IN).unlink(missing_ok=True)
    unit = read_unit(root, name, unit_text)
    command = list(unit.exec_start)
    jsonl = _jsonl_of(command, locate or _in_root(root))
    if jsonl is None:
        states = [folder for folder, variable in unit.directories
                  if variable == "STATE_DIRECTORY"]
        if not states:
            raise InputError(f"{name}: the app writes no JSON Lines and the unit has no "
                             "StateDirectory= for the rehearsal's", reference=Ref.BAD_UNIT_FILE)
        jsonl = f"{states[0]}/rehearsal.jsonl"
        command += ["--jsonl", jsonl]
    command += ["--source", CLIP, "--max-frames", str(frames)]
    drop_ins.mkdir(parents=True, exist_ok=True)
    (drop_ins / DROP_IN).write_text(drop_in(command), encoding="utf-8")
    return read_unit(root, name, unit_text), jsonl


def _in_root(root: Path) -> Callable[[str], Path]:
    return lambda path: root / path.lstrip("/")


def release_files(root: Path, current: str, bundle: Path) -> Callable[[str], Path]:
    """Where the files of a release about to become ``current`` are: paths under ``current``
    are read from its bundle folder, everything else from the root."""
    def locate(path: str) -> Path:
        if path.startswith(current.rstrip("/") + "/"):
            return bundle / path[len(current.rstrip("/")) + 1:]
        return root / path.lstrip("/")
    return locate


def _jsonl_of(command: Sequence[str], locate: Callable[[str], Path]) -> str | None:
    """The JSON Lines path the command line or its --config names."""
    for flag, value in zip(command, command[1:], strict=False):
        if flag == "--jsonl":
            return value
    for flag, value in zip(command, command[1:], strict=False):
        if flag == "--config":
            config = locate(value)
            if config.is_file():
                data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
                jsonl = data.get("jsonl") if isinstance(data, dict) else None
                return str(jsonl) if jsonl else None
    return None


def health_command(root: Path, name: str, current: str, bundle: Path) -> str:
    """What install.sh runs as its health check after switching ``current`` to the release in
    ``bundle``: the service's command line as that release's unit says, for a few frames."""
    unit_text = (bundle / "systemd" / name).read_text(encoding="utf-8")
    locate = release_files(root, current, bundle)
    unit, _ = prepared_unit(root, name, HEALTH_FRAMES, unit_text, locate)
    make_directories(unit, root)
    return shell_command(unit, root, environment(unit, root, locate))


def run_service(root: Path, name: str, log: Path) -> ServiceRun:
    """Start the installed service as its unit says, wait for HEALTH_FRAMES new records,
    measure up to MEASURE_FRAMES, stop it as systemd would."""
    start = time.monotonic()
    unit, jsonl = prepared_unit(root, name, MEASURE_FRAMES)
    make_directories(unit, root)
    command = shell_command(unit, root, environment(unit, root))
    records = _Records(root / jsonl.lstrip("/"))
    with open(log, "wb") as output:
        process = subprocess.Popen(["chroot", str(root), "/bin/sh", "-c", command],
                                   stdout=output, stderr=subprocess.STDOUT,
                                   env=plain_environment(), start_new_session=True)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            grew = False  # records seen arriving one by one: a live source, stopped by us
            while process.poll() is None and time.monotonic() < deadline:
                count = records.count()
                grew = grew or 0 < count < MEASURE_FRAMES
                if count >= MEASURE_FRAMES:
                    break
                time.sleep(POLL_S)
            stop_s = unit.timeout_stop_s or DEFAULT_STOP_S
            if process.poll() is None and records.count() and not grew:
                # a file source's records appear whole when it ends: the app is finishing
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=stop_s)
            stopped_by = "itself" if process.poll() is not None else "SIGTERM"
            if process.poll() is None:
                exit_code = _stop(process, stop_s)
                if exit_code is None:
                    stopped_by = "SIGKILL"
            else:
                exit_code = process.returncode
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    frames = records.count()
    text = log.read_text(encoding="utf-8", errors="replace")
    found = _BACKEND_LINE.search(text)
    why = ""
    if frames < HEALTH_FRAMES:
        tail = " | ".join(text.strip().splitlines()[-3:])
        why = (f"{frames} frame(s) in {time.monotonic() - start:.0f} s, "
               f"exit {exit_code}: {tail or 'no output'}")
    elif stopped_by == "SIGKILL":
        why = f"did not stop within TimeoutStopSec ({unit.timeout_stop_s or DEFAULT_STOP_S:g} s)"
    elif exit_code not in CLEAN_EXITS:
        why = f"exited {exit_code} ({stopped_by})"
    return ServiceRun(frames=frames, fps=records.fps(), backend=found.group(2) if found else None,
                      exit_code=exit_code, stopped_by=stopped_by, healthy=not why, why=why,
                      seconds=time.monotonic() - start, user=unit.user, log=log)


def _stop(process: subprocess.Popen, timeout_s: float) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout_s``; the exit code, None when it had to be killed."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


class _Records:
    """The records appended to a JSON Lines file since it was first looked at."""

    def __init__(self, path: Path) -> None:
        self.path = path
        before = path.stat() if path.exists() else None
        self.offset = before.st_size if before else 0
        self.inode = before.st_ino if before else None
        self.times: list[float] = []
        self._partial = b""

    def count(self) -> int:
        if self.path.exists():
            now = self.path.stat()
            if now.st_ino != self.inode or now.st_size < self.offset:
                # another file (a file source's records renamed into place at its end, a
                # rotation) or truncated: everything in it is this run's
                self.inode, self.offset, self._partial, self.times = now.st_ino, 0, b"", []
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = self._partial + handle.read()
            self.offset += len(data) - len(self._partial)
            *lines, self._partial = data.split(b"\n")
            for line in lines:
                try:
                    self.times.append(float(json.loads(line)["time"]))
                except (ValueError, KeyError, TypeError):
                    continue  # not a frame record
        return len(self.times)

    def fps(self) -> float | None:
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return None
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])
