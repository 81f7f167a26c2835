"""The bundle's app, started before the bundle is signed: a few generated frames on sim and cpu.

Why: every model stage can pass its gates and the service still fail on every board, because
what the board runs is the app (``ExecStart``: ``edgefuse detect --config app/config.yaml`` in
the release folder) over the packaged model and config, and nothing else in the build runs it:
a spec naming 3 classes for a detector with 80 built, signed and shipped a service whose first
frame fails with ``error[bad-layout]``. So the build runs that command line itself, after the
bundle's files are assembled and before MANIFEST.json is signed and archived, and a failure
stops the build with nothing written (the builder's temporary folder goes).

How it stays the service's run and writes nothing anywhere it should not:

* the same entry (``python -m edgefuse <verb> --config ...`` of the build host's Python, in a
  subprocess, so an import failure or a crash is seen as a board would see it: an exit status
  and stderr; the edgefuse it imports is the one this build packs into the wheel), the release
  folder as the working directory (``models/<name>`` resolves as on the board), the spec's
  ``service.environment`` (not CANN's paths: they are the board's), no ``NOTIFY_SOCKET`` (the
  unit's notify protocol is not exercised here);
* the packaged ``app/config.yaml`` with only these keys replaced, in a copy in a temporary
  folder: the source(s) by a folder of ``TRIAL_FRAMES`` generated scenes
  (``edgefuse.vision.scenes.shapes``) of the configured camera size (``camera.width`` and
  ``camera.height``), else a common camera size that holds the counting lines and zones
  (``frame_size``), else ``DEFAULT_FRAME_SIZE``, read in order (``live: false``, so the
  count is exact) and ``max_frames`` of them per stream; ``backend`` by one of ``sim`` (the
  board's contract: the BUILD_DIR and the simulated OM; where edgefuse knows the soc's board)
  and ``cpu`` (when the app's backend list names it: the board's own fallback; always when
  ``sim`` cannot run); ``jsonl`` and ``save`` moved under the temporary folder
  (a JSON Lines sink is added when there is none: it counts the frames); ``events`` (MQTT,
  webhook) dropped, with tracking kept on when they would have turned it on; ``serve`` on
  127.0.0.1 port 0; ``show`` off. Nothing reaches a real host;
* the release folder is compared before and after: a write into it (read-only on the board) is
  refused too;
* ``TRIAL_TIMEOUT_S`` per backend; the two backends run at the same time.

A failure is ``error[app-failed-before-signing]`` (exit 2) headed by the spec key it most likely
comes from (``blame``: a config key the app's error quotes, else the model's classes,
preprocess or postprocess where its error is about those, else the model), with the app's own
error in full beneath it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from edgefuse._deps import require
from edgefuse.bundle.digests import PACKAGE_DIR
from edgefuse.bundle.service import VERBS
from edgefuse.bundle.spec import BuildSpec
from edgefuse.bundle.spec_problems import dotted
from edgefuse.bundle.yaml_positions import Path_, load_located
from edgefuse.errors import InputError, Ref
from edgefuse.fallback.sim_target import knows_board
from edgefuse.vision.scenes.shapes import SceneGenerator

TRIAL_FRAMES = 5  # frames per stream and backend
TRIAL_TIMEOUT_S = 300.0  # per backend: loading a large model on sim takes a while on a slow host
# A camera opened without a size (V4L2 through OpenCV) gives its driver's default, 640x480 for
# UVC cameras: the frame size when the config's camera section gives none.
DEFAULT_FRAME_SIZE = (480, 640)  # height, width
CAMERA_SIZES = ((480, 640), (720, 1280), (1080, 1920), (1440, 2560), (2160, 3840))
CONFIG = "app/config.yaml"
# App errors about the model itself (when no spec key of its classes, preprocess or layout is
# at fault): the model is blamed; any other error is the app's as a whole.
MODEL_REFERENCES = frozenset(ref.value for ref in (
    Ref.BAD_LAYOUT, Ref.BAD_APP_INFO, Ref.WRONG_MODEL_KIND, Ref.BAD_PREPROCESS,
    Ref.MODEL_LOAD_FAILED, Ref.BOARD_MEMORY_EXCEEDED))
_ERROR_LINE = re.compile(r"^error\[(?P<ref>[a-z0-9-]+)\]: (?P<message>.*)$")
_UNSAFE_ENVIRONMENT = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                       "LISTEN_PID")


@dataclasses.dataclass(frozen=True)
class TrialRun:
    backend: str
    frames: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class AppTrial:
    """What ran: ``frames`` per stream on each backend of ``runs``; ``skipped``: why not."""

    command: str
    frame_size: tuple[int, int]  # height, width
    streams: int
    runs: tuple[TrialRun, ...]
    skipped: dict[str, str]

    def line(self) -> str:
        """``app: ran 5 frames of a generated 640x480 source on sim (2.4 s) and cpu (1.9 s)``."""
        height, width = self.frame_size
        ran = " and ".join(f"{run.backend} ({run.seconds:.1f} s)" for run in self.runs)
        frames = self.runs[0].frames
        streams = f" in each of {self.streams} streams" if self.streams > 1 else ""
        text = (f"app: `{self.command}` ran {frames} frames of a generated {width}x{height} "
                f"source{streams} on {ran}")
        return text + "".join(f"; not on {name}: {why}" for name, why in self.skipped.items())

    def record(self) -> dict[str, Any]:
        """The build log's ``app`` entry."""
        return {"command": self.command, "frame_size": list(self.frame_size),
                "streams": self.streams, "skipped": self.skipped,
                "runs": [dataclasses.asdict(run) for run in self.runs]}


def try_app(bundle: Path, spec: BuildSpec, *, say: Callable[[str], None] = lambda line: None,
            frames: int = TRIAL_FRAMES, timeout_s: float = TRIAL_TIMEOUT_S) -> AppTrial | None:
    """Run the bundle's app as its service would (see the module docstring); None when the
    spec has no app. Raises ``InputError`` (``Ref.APP_FAILED_BEFORE_SIGNING``) when it fails.
    ``say`` gets a line as the runs start and one with what ran."""
    if spec.app is None:
        return None
    packaged = yaml.safe_load((bundle / CONFIG).read_text(encoding="utf-8"))
    verb = VERBS[spec.app["kind"]]
    command = f"edgefuse {verb} --config {CONFIG}"
    simulated = knows_board(spec.soc)  # else sim needs a board memory the app cannot give it
    backends = (["sim"] if simulated else []) + (
        ["cpu"] if "cpu" in packaged["backend"] or not simulated else [])
    skipped = {} if simulated else {"sim": f"edgefuse does not simulate {spec.soc}'s board "
                                           "(its golden ran on cpu too)"}
    if "cpu" not in backends:
        skipped["cpu"] = "not in the app's backend list"
    size = frame_size(packaged)
    streams = len(packaged.get("sources") or []) or 1
    before = _listing(bundle)
    with tempfile.TemporaryDirectory(prefix="edgefuse-app-trial-") as scratch:
        root = Path(scratch)
        stride = max([packaged.get("stride") or 1]
                     + [s.get("stride") or 1 for s in packaged.get("sources") or []
                        if isinstance(s, dict)])
        source = write_frames(root / "frames", size, frames * stride)
        say(f"app: `{command}` on {' and '.join(backends)}, {frames} generated "
            f"{size[1]}x{size[0]} frames each ...")
        started: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
        runs = []
        try:
            for backend in backends:  # at the same time: the trial adds the slower one's time
                config = trial_config(packaged, source, root / backend, backend, frames)
                started[backend] = _start(verb, config, bundle, root / backend, spec)
            for backend, (process, began) in started.items():
                run = (f"on {backend} with {frames} generated {size[1]}x{size[0]} frames (the "
                       "size of app.config.camera, else a common camera size that holds the "
                       "lines and zones)")
                seconds = _finish(process, began, root / backend, spec, command, run,
                                  frames * streams, timeout_s)
                runs.append(TrialRun(backend, frames, round(seconds, 3)))
        finally:
            for process, _ in started.values():
                _stop(process)
    changed = _changes(before, _listing(bundle))
    if changed:
        raise InputError(
            f"the app wrote into its release folder: {', '.join(changed[:5])}",
            context=f"`{command}` in {bundle}, as the unit's ExecStart runs it",
            hint="on the board the release is read-only (ProtectSystem=strict): send the app's "
                 "outputs to app.sinks under /var/lib/edgefuse/<bundle name>/; nothing was "
                 "written", reference=Ref.APP_FAILED_BEFORE_SIGNING)
    trial = AppTrial(command, size, streams, tuple(runs), skipped)
    say(trial.line())
    return trial


def frame_size(config: dict[str, Any]) -> tuple[int, int]:
    """(height, width) of the generated frames: the config's camera size; else the first of the
    common camera sizes (``CAMERA_SIZES``, from ``DEFAULT_FRAME_SIZE`` up) that holds every point
    of the config's counting lines and zones, which are drawn on the camera's real frames (the
    largest when none does)."""
    camera = config.get("camera") or {}
    if camera.get("width") and camera.get("height"):
        return int(camera["height"]), int(camera["width"])
    owners = [config, *(s for s in config.get("sources") or [] if isinstance(s, dict))]
    points = [point for owner in owners for line in owner.get("lines") or []
              for point in (line.get("start"), line.get("end"))]
    points += [point for owner in owners for zone in owner.get("zones") or []
               for point in zone.get("polygon", [])]
    for height, width in CAMERA_SIZES:
        if all(point[0] <= width and point[1] <= height for point in points if point):
            return height, width
    return CAMERA_SIZES[-1]  # a point beyond every size: the app says which


def write_frames(folder: Path, size: tuple[int, int], count: int) -> Path:
    """``count`` frames of one generated clip (moving shapes) as PNG files in ``folder``."""
    cv2 = require("cv2", extra="vision", purpose="the frames of the app's trial run")
    folder.mkdir(parents=True)
    clip = SceneGenerator(seed=0, size=size).clip(0, frames=count)
    for index, scene in enumerate(clip):
        if not cv2.imwrite(str(folder / f"{index:04d}.png"), scene.image):
            raise OSError(f"OpenCV could not write {folder / f'{index:04d}.png'}")
    return folder


def trial_config(packaged: dict[str, Any], frames: Path, sinks: Path, backend: str,
                 count: int) -> Path:
    """The packaged config with the trial's source, backend and sinks (module docstring),
    written as ``sinks/config.yaml``; returns its path."""
    values = dict(packaged)
    values.update(backend=[backend], live=False, max_frames=count, show=False)
    if values.get("sources"):
        values["sources"] = [_trial_stream(entry, frames) for entry in values["sources"]]
    elif values.get("source") is not None:  # none at all: the app's own error, as on the board
        values["source"] = str(frames)
    several = bool(values.get("sources")) and len(values["sources"]) > 1
    for key in ("jsonl", "save"):
        if values.get(key):
            values[key] = _redirect(values[key], sinks / "out")
    if not values.get("jsonl"):
        values["jsonl"] = str(sinks / "trial" / ("{name}.jsonl" if several else "frames.jsonl"))
        (sinks / "trial").mkdir(parents=True, exist_ok=True)
    if values.get("events"):  # detection only: MQTT and webhooks reach no host from here
        values["events"] = {}
        if values.get("track") is None:
            values["track"] = True  # as the events would have turned tracking on
    if values.get("serve") is not None:
        values["serve"] = "127.0.0.1:0"
    path = sinks / "config.yaml"
    sinks.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path


def _trial_stream(entry: Any, frames: Path) -> Any:
    if not isinstance(entry, dict):
        return str(frames)
    kept = {key: value for key, value in entry.items()
            if key not in ("source", "url", "live", "max_frames")}
    return {**kept, "source": str(frames)}


def _redirect(path: str, root: Path) -> str:
    """``path`` (a board path, or one relative to the release) moved under ``root``, with its
    folders up to the first that holds ``{name}`` made."""
    parts = [part for part in PurePosixPath(path).parts if part not in ("/", ".", "..")]
    fixed = []
    for part in parts[:-1]:
        if "{name}" in part:
            break
        fixed.append(part)
    root.joinpath(*fixed).mkdir(parents=True, exist_ok=True)
    return str(root.joinpath(*parts)) + ("/" if path.endswith("/") else "")


def _start(verb: str, config: Path, bundle: Path, folder: Path,
           spec: BuildSpec) -> tuple[subprocess.Popen[bytes], float]:
    environment = {name: value for name, value in os.environ.items()
                   if name not in _UNSAFE_ENVIRONMENT}
    for name, value in spec.service["environment"].items():
        environment[name] = str(value).lower() if isinstance(value, bool) else str(value)
    environment["PYTHONUNBUFFERED"] = "1"
    # the edgefuse this build runs and packs into the bundle's wheel, also from a checkout that
    # is not installed (the working directory is the bundle, not the checkout)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_DIR.parent), *filter(None, [environment.get("PYTHONPATH")])])
    with open(folder / "stdout", "wb") as stdout, open(folder / "stderr", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "edgefuse", verb, "--config", str(config)], cwd=bundle,
            env=environment, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            start_new_session=True)  # its own process group: a timeout stops all of it
    return process, time.perf_counter()


def _finish(process: subprocess.Popen[bytes], began: float, folder: Path, spec: BuildSpec,
            command: str, run: str, expected: int, timeout_s: float) -> float:
    """The run's seconds, once it exited 0 having finished ``expected`` frames; else the
    build's error (``_failure``)."""
    try:
        code = process.wait(timeout=max(0.0, timeout_s - (time.perf_counter() - began)))
    except subprocess.TimeoutExpired:
        _stop(process)
        raise _failure(spec, run, command, f"it did not finish {expected} frames within "
                       f"{timeout_s:g} s", _tail(folder / "stderr"), None) from None
    seconds = time.perf_counter() - began
    stderr = (folder / "stderr").read_text(encoding="utf-8", errors="replace")
    if code != 0:
        status = (f"it was killed by {signal.Signals(-code).name}" if code < 0
                  else f"it exited with status {code}")
        raise _failure(spec, run, command, status, stderr, app_error(stderr))
    done = _frames_done(folder)
    if done < expected:
        raise _failure(spec, run, command, f"it exited 0 after {done} of {expected} frames",
                       stderr, None)
    return seconds


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def _frames_done(folder: Path) -> int:
    """Frame records in the run's JSON Lines (every file under the sink folders)."""
    count = 0
    for path in sorted(folder.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and "frame" in json.loads(line):
                count += 1
    return count


def _tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _last_line(text: str) -> str:
    """The last line a crashed run printed (a traceback's exception line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "it printed nothing"


def app_error(stderr: str) -> tuple[str, str] | None:
    """(reference, message) of the last ``error[...]`` line the app printed, if any."""
    found = None
    for line in stderr.splitlines():
        match = _ERROR_LINE.match(line)
        if match:
            found = (match["ref"], match["message"])
    return found


def _failure(spec: BuildSpec, run: str, command: str, what: str, stderr: str,
             error: tuple[str, str] | None) -> InputError:
    path, about = blame(spec, error)
    shown = error[1] if error else f"{what}: {_last_line(stderr)}"
    where = _position(spec, path)
    said = stderr.rstrip()
    if error:  # the app's own error, from its first line on; else the last lines it printed
        lines = said.splitlines()
        start = max(i for i, line in enumerate(lines) if _ERROR_LINE.match(line))
        said = "\n".join(lines[start:])
    else:
        said = "\n".join(said.splitlines()[-20:]) or "(it printed nothing)"
    fix = f"fix {dotted(path)} in {spec.path.name}"
    if error and error[0] == Ref.MISSING_DEPENDENCY.value:  # this host's Python, not the bundle's
        fix = ("the trial runs the app with this build host's Python: install what it names "
               "here (the board's environment is the bundle's own wheels)")
    return InputError(
        f"{dotted(path)}: {shown}",
        context=f"{about} ({where})\nthe app (`{command}`, as the unit's ExecStart runs it) "
                f"failed {run}: {what}\n{said}",
        hint=f"{fix}, and build again; no bundle, archive or signature was written",
        reference=Ref.APP_FAILED_BEFORE_SIGNING)


def blame(spec: BuildSpec, error: tuple[str, str] | None) -> tuple[Path_, str]:
    """The spec key an app error most likely comes from, and a phrase that says what it holds.

    In order: a key of the app's config the error quotes (``'conf'``, as the app's config
    checks write it) or, for a ``bad-config`` error, names, where the spec sets it; for an error
    about classes, preprocessing or the output layout, the app config's override of it, else the
    model's own in ``models[i]``; else the model (its source) for an error about the model
    (``MODEL_REFERENCES``); else the app as a whole (a crash, a hang, a missing package)."""
    app = spec.document["app"]
    config = app.get("config") or {}
    index = next(i for i, m in enumerate(spec.document["models"]) if m["name"] == app["model"])
    model = spec.document["models"][index]
    label = f"the model {model['name']} ({model['source']})"
    whole: tuple[Path_, str] = ("app",), f"the {app['kind']} app over {label}"
    if error is None:  # a crash, a hang: the app as a whole
        return whole
    ref, message = error
    quoted = re.findall(r"'([a-z_]+)(?:['.\[])", message)
    for key in quoted:
        if key in config:
            return ("app", "config", key), f"the app's {key}: {_inline(config[key])}"
        if key in ("source", "sources", "backend", "model"):
            return ("app", key if key != "sources" else "source"), f"the app's {key}"
        if key in ("jsonl", "save") and key in app.get("sinks", {}):
            return ("app", "sinks", key), f"the app's {key} sink"
    if ref == Ref.BAD_CONFIG.value:  # "unknown class 'dog' in classes", "no source given"
        named: list[tuple[str, Path_]] = [(key, ("app", "config", key)) for key in config]
        named += [("source", ("app", "source")), ("backend", ("app", "backend"))]
        for key, path in named:
            if re.search(rf"\b({re.escape(key)}|{re.escape(key.removesuffix('s'))})\b", message):
                value = config.get(key, app.get(key))
                return path, f"the app's {key}: {_inline(value)}"
    lowered = message.lower()
    for word, override, own in (("class", "class_names", "classes"),
                                ("preprocess", "preprocess", "preprocess"),
                                ("layout", "layout", "postprocess")):
        if word not in lowered:
            continue
        if override in config:
            return ("app", "config", override), (f"the app's {override}: "
                                                 f"{_inline(config[override])}")
        if own in model:
            value = model[own]
            count = f"{len(value)} names, " if isinstance(value, list) else ""
            return ("models", index, own), f"{count}{own} of {label}: {_inline(value)}"
    if ref in MODEL_REFERENCES:
        return ("models", index, "source"), f"{label}; the app's error is {ref}"
    return whole  # the app's environment (a missing package), its sources or sinks


def _inline(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _position(spec: BuildSpec, path: Path_) -> str:
    located = load_located(spec.path.read_text(encoding="utf-8"))
    while path and path not in located.keys:
        path = path[:-1]
    position = located.keys.get(path)
    if position is None:
        return spec.path.name
    return f"{spec.path.name}:{position.line}:{position.column}"


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {path.relative_to(folder).as_posix(): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*")}


def _changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(name for name in before.keys() | after.keys()
                  if before.get(name) != after.get(name))
