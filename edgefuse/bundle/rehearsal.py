"""The board rehearsal: a bundle installed, run, upgraded and rolled back in an aarch64 system.

Why: the bundle's wheels, its Python environment, its installer and its service only ever meet an
aarch64 system on the board. Wheels resolved for the wrong tags, a NumPy the OS's OpenCV was not
built against, a unit that cannot start, an installer that cannot roll back: each shows there,
after signing, in the field. The rehearsal runs the whole life of a release on this machine
first, in a Debian 12 arm64 root (or the board image's own, ``--rootfs``) under qemu-user:

1. the spec built three times, signed by the publisher: as it is, a newer version, and a newer
   one broken on purpose (``rehearsal_releases``);
2. the root's python3 checked against the bundle's target Python, before anything is installed;
3. the publisher's public key and ``edgefuse-verify-installer`` put into the root as the card
   maker's hook puts them on a card (the key under its fingerprint in ``/etc/edgefuse/keys/``),
   then the first install as a board makes it: the bundle's install.sh run through that
   verifier, which checks install.sh.sig against the key first;
4. the service started from the installed unit as systemd would (``rehearsal_service``): frames
   of a generated clip must reach the JSON Lines on the CPU fallback;
5. the upgrade with the installer already on the board, its health check being the new release's
   app on a few frames; the service again;
6. the broken release: install.sh's health check must fail and put the previous release back;
   the service must still run;
7. ``install.sh --rollback``: the first release is current again, and runs.

Each step is timed and reported (table and JSON); a failed step stops the run (exit 1).
Figures measured here are emulated, never a board's: docs/fleet.md says so beside them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgefuse.bundle.rehearsal_qemu import find_qemu, register
from edgefuse.bundle.rehearsal_releases import Release, copy_release, publisher_key, releases_of
from edgefuse.bundle.rehearsal_root import (
    RootRecipe,
    RunRoot,
    cached_root,
    debian_mirror,
    run_in_root,
)
from edgefuse.bundle.rehearsal_service import health_command, put_clip, run_service
from edgefuse.bundle.service import VERIFIER, VERIFIER_PATH
from edgefuse.bundle.signing import INSTALLER_SIGNATURE_SUFFIX, key_fingerprint
from edgefuse.bundle.spec import BuildSpec, load_spec
from edgefuse.errors import EdgefuseError, InputError, Ref

log = logging.getLogger(__name__)

STAGE = "/var/tmp/edgefuse-rehearsal"  # where releases are copied inside the root
INSTALL_TIMEOUT_S = 3600.0
PYTHON_PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


@dataclasses.dataclass
class Step:
    name: str
    passed: bool
    result: str
    seconds: float
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RehearsalReport:
    bundle: str
    root: str
    qemu: str
    steps: list[Step] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.steps) and all(step.passed for step in self.steps)

    def figure(self, name: str) -> Any:
        """The first step's figure of that name (``install_s``, ``fps``, ...)."""
        return next((step.figures[name] for step in self.steps if name in step.figures), None)

    def render(self) -> str:
        width = max(len(step.name) for step in self.steps) if self.steps else 4
        lines = [f"rehearsal of {self.bundle} in {self.root} ({self.qemu})",
                 f"{'step':<{width}}  {'result':<6}  {'time':>8}  {'cpu':>8}  details"]
        for step in self.steps:
            lines.append(f"{step.name:<{width}}  {'ok' if step.passed else 'FAIL':<6}  "
                         f"{step.seconds:>7.1f}s  {step.figures.get('cpu_s', 0):>7.1f}s  "
                         f"{step.result}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "root": self.root, "qemu": self.qemu,
                "passed": self.passed,
                "steps": [{**dataclasses.asdict(step), "seconds": round(step.seconds, 2)}
                          for step in self.steps]}


class StepFailed(EdgefuseError):
    """A rehearsal step failed: the bundle would fail on the board (exit 1, like a gate)."""

    reference = Ref.REHEARSAL_FAILED.value
    exit_code = 1


def rehearse(spec_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
             sign_key: str | os.PathLike[str] | None = None,
             rootfs: str | os.PathLike[str] | None = None,
             qemu: str | os.PathLike[str] | None = None, mirror: str | None = None,
             cache_dir: str | os.PathLike[str] | None = None,
             progress: Callable[[str], None] = lambda line: None) -> RehearsalReport:
    """Rehearse the spec's bundle in an aarch64 root (see the module docstring).

    Raises a user error (exit 2) for what stops the rehearsal from starting (not root, no qemu
    10, no binfmt_misc, another Python in the root) and ``StepFailed`` (exit 1) when the bundle
    fails a step; the report so far is ``error.report``."""
    if os.geteuid() != 0:
        raise InputError("the aarch64 rehearsal needs root (chroot, mounts, binfmt_misc)",
                         hint="run it with sudo, or in CI as root",
                         reference=Ref.REHEARSAL_NEEDS_ROOT)
    spec = load_spec(spec_path)
    if spec.app is None:
        raise InputError(f"{spec.path} has no app: the rehearsal runs the bundle's service",
                         hint="add an app section (see examples/tiny-camera.yaml)",
                         reference=Ref.BAD_ARGUMENT)
    out = _fresh_folder(Path(out_dir))
    if rootfs is not None and not (Path(rootfs) / "usr" / "bin").is_dir():
        raise InputError(f"--rootfs '{rootfs}' is not a root file system (no usr/bin)",
                         hint="give the folder the board image's root partition is mounted on",
                         reference=Ref.ROOTFS_FAILED)
    found = find_qemu(qemu)
    started = time.monotonic()
    note = register(found)
    report = RehearsalReport(spec.bundle_id, str(rootfs or "debian bookworm arm64"),
                             f"qemu-aarch64 {found.version_text}")
    runner = _Runner(report, out, progress)
    runner.add(Step("qemu", True, note, time.monotonic() - started))
    lower = runner.timed("root", lambda: _lower_root(rootfs, mirror),
                         lambda made: made[1])[0]
    with RunRoot(lower, out / "run") as run:
        runner.add(Step("root copy", True, f"{run.how} over {lower}", 0.0))
        steps = _Rehearsal(runner, spec, run.path)
        steps.check_python()  # before the builds: a wrong board costs no build
        key, public = publisher_key(Path(sign_key) if sign_key else None, out)
        releases = runner.timed("build", lambda: releases_of(
            spec, out / "builds", key, Path(cache_dir) if cache_dir else None),
            lambda made: ", ".join(f"{r.version} (build {r.build_number})" for r in made)
            + f"; {made[2].version} broken: its model cut in half, signed again")
        steps.run(releases, public)
    return report


def _fresh_folder(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"'{out}' exists and is not an empty folder",
                         hint="give a new folder for the rehearsal's builds, logs and report",
                         reference=Ref.BAD_OUTPUT_PATH)
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def _lower_root(rootfs: str | os.PathLike[str] | None, mirror: str | None) -> tuple[Path, str]:
    if rootfs is not None:
        return Path(rootfs).resolve(), f"the board image's root {rootfs}"
    recipe = RootRecipe()
    made = cached_root(recipe, mirror or debian_mirror())
    how = "made by debootstrap" if made.made else "reused from the cache"
    return made.rootfs, f"{recipe.suite} {recipe.arch} {how}: {made.rootfs}"


class _Runner:
    """Adds steps to the report and stops at the first failed one."""

    def __init__(self, report: RehearsalReport, out: Path, progress: Callable[[str], None]):
        self.report = report
        self.out = out
        self.progress = progress
        self.cpu_s = _cpu_seconds()
        (out / "logs").mkdir(exist_ok=True)

    def add(self, step: Step) -> None:
        """Record ``step`` with the processor time spent since the last one (this process and
        the programs it ran, emulated ones included): on a busy host, wall time says little."""
        cpu_s = _cpu_seconds()
        step.figures["cpu_s"] = round(cpu_s - self.cpu_s, 1)
        self.cpu_s = cpu_s
        self.report.steps.append(step)
        self.progress(f"{step.name}: {'ok' if step.passed else 'FAIL'} ({step.seconds:.1f} s) "
                      f"{step.result}")
        if not step.passed:
            error = StepFailed(f"the rehearsal failed at '{step.name}': {step.result}",
                               context=f"logs: {self.out / 'logs'}",
                               hint="the bundle would fail on the board the same way")
            error.report = self.report  # type: ignore[attr-defined]
            raise error

    def timed(self, name: str, work: Callable[[], Any], describe: Callable[[Any], str]) -> Any:
        start = time.monotonic()
        made = work()
        self.add(Step(name, True, describe(made), time.monotonic() - start))
        return made


class _Rehearsal:
    """The steps inside one run's root."""

    def __init__(self, runner: _Runner, spec: BuildSpec, root: Path) -> None:
        self.runner = runner
        self.spec = spec
        self.root = root
        self.releases: tuple[Release, ...] = ()
        self.prefix = spec.prefix
        self.unit = f"{spec.service['name']}.service"
        self.names: dict[str, str] = {}

    def run(self, releases: tuple[Release, Release, Release], public_key: Path) -> None:
        self.releases = releases
        first, second, broken = releases
        self.stage(public_key)
        # a board's first install: the installer beside the archive, run only through the
        # verifier the card maker's hook put there (stage)
        self.install(f"install {first.version}", first, self.names[first.version],
                     installer=(VERIFIER_PATH, f"{STAGE}/install.sh"), health=None,
                     figure="install_s")
        self.service(f"service {first.version}", first)
        self.install(f"upgrade {second.version}", second, self.names[second.version],
                     installer=(f"{self.prefix}/current/install.sh",), health=second,
                     figure="upgrade_s")
        self.service(f"service {second.version}", second)
        self.broken(broken, second)
        self.service(f"service {second.version} again", second)
        self.rollback(first)
        self.service(f"service {first.version} again", first)

    def check_python(self) -> None:
        start = time.monotonic()
        done = run_in_root(self.root, ["python3", "-c", PYTHON_PROBE], timeout=300)
        have = done.stdout.strip()
        want = self.spec.python["version"]
        if done.returncode != 0:
            raise InputError(
                f"the root has no working python3 ({(done.stderr or done.stdout).strip()[:200]})",
                hint="the bundle's Python environment is built from the board's python3 "
                     f"{want}: give a root that has it", reference=Ref.WRONG_BOARD_PYTHON)
        if have != want:
            raise InputError(
                f"the root's python3 is {have}, but {self.spec.bundle_id}'s wheels are for "
                f"Python {want} (python.version): install.sh would refuse it on this board",
                hint=f"build for this board with python.version: \"{have}\", or rehearse on a "
                     f"root with python3 {want}; nothing was installed",
                reference=Ref.WRONG_BOARD_PYTHON)
        self.runner.add(Step("python", True, f"the root's python3 is {have}, the bundle's "
                             "target", time.monotonic() - start))

    def stage(self, public_key: Path) -> None:
        """The releases, the first installer with its signature and the clip in the root; the
        key and the verifier where the card maker's hook (minirc_install_hook.sh) puts them."""
        start = time.monotonic()
        stage = self.root / STAGE.lstrip("/")
        stage.mkdir(parents=True, exist_ok=True, mode=0o755)
        for release in self.releases:
            self.names[release.version] = copy_release(release, stage)
        installer = self.releases[0].installer
        signature = installer.with_name(installer.name + INSTALLER_SIGNATURE_SUFFIX)
        shutil.copyfile(installer, stage / "install.sh")
        shutil.copyfile(signature, stage / f"install.sh{INSTALLER_SIGNATURE_SUFFIX}")
        put_clip(self.root)
        keys = self.root / "etc" / "edgefuse" / "keys"
        keys.mkdir(parents=True, exist_ok=True, mode=0o755)
        trusted = f"{key_fingerprint(public_key)}.pem"
        shutil.copyfile(public_key, keys / trusted)
        (keys / trusted).chmod(0o644)
        verifier = self.root / VERIFIER_PATH.lstrip("/")
        verifier.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(self.releases[0].bundle / VERIFIER, verifier)
        verifier.chmod(0o755)
        self.runner.add(Step("trust", True, f"/etc/edgefuse/keys/{trusted} (the publisher's "
                             f"key) and {VERIFIER_PATH}, as the card maker's hook puts them",
                             time.monotonic() - start))

    def current(self) -> str:
        link = self.root / self.prefix.lstrip("/") / "current"
        return os.readlink(link) if link.is_symlink() else ""

    def _install_sh(self, name: str, argv: list[str], health: Release | None) -> tuple[
            subprocess.CompletedProcess, float]:
        if health is not None:
            argv += ["--health-cmd", health_command(self.root, self.unit,
                                                    f"{self.prefix}/current", health.bundle),
                     # one run of the service for HEALTH_FRAMES frames: minutes under
                     # emulation, once (a board's default is 3 passes over 15 s)
                     "--health-timeout", "0", "--health-passes", "1",
                     "--health-check-timeout", str(int(INSTALL_TIMEOUT_S))]
        start = time.monotonic()
        try:
            done = run_in_root(self.root, ["bash", *argv], timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            done = subprocess.CompletedProcess(argv, 124, _text(exc.stdout), _text(exc.stderr)
                                               + f"\ntimed out after {INSTALL_TIMEOUT_S:g} s")
        seconds = time.monotonic() - start
        log_file = self.runner.out / "logs" / f"{name.replace(' ', '-')}.log"
        log_file.write_text(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}", encoding="utf-8")
        return done, seconds

    def install(self, name: str, release: Release, staged: str, *, installer: tuple[str, ...],
                health: Release | None, figure: str) -> None:
        """``bash INSTALLER... ARCHIVE`` in the root: install.sh, or the verifier and the
        install.sh it is to check and run."""
        done, seconds = self._install_sh(name, [*installer, f"{STAGE}/{staged}"], health)
        current = self.current()
        passed = done.returncode == 0 and f"-{release.version}-" in current
        result = (f"current -> {current}" if passed else
                  f"install.sh exit {done.returncode}: {_tail(done)}")
        self.runner.add(Step(name, passed, result, seconds, {figure: round(seconds, 1)}))

    def service(self, name: str, release: Release) -> None:
        current = self.current()
        if f"-{release.version}-" not in current:
            self.runner.add(Step(name, False, f"current is {current}, not {release.version}", 0))
        ran = run_service(self.root, self.unit,
                          self.runner.out / "logs" / f"{name.replace(' ', '-')}.log")
        fps = f"{ran.fps:.1f} fps under emulation" if ran.fps is not None else "no rate"
        result = (f"as {ran.user or 'root'}: {ran.frames} frames on {ran.backend}, {fps}, "
                  f"stopped by {ran.stopped_by}, exit {ran.exit_code}"
                  if ran.healthy else ran.why)
        self.runner.add(Step(name, ran.healthy, result, ran.seconds,
                             {"frames": ran.frames, "fps": ran.fps, "backend": ran.backend}))

    def broken(self, release: Release, previous: Release) -> None:
        name = f"broken {release.version}"
        before = self.current()
        done, seconds = self._install_sh(
            name, [f"{self.prefix}/current/install.sh", f"{STAGE}/{self.names[release.version]}"],
            release)
        after = self.current()
        gone = not any(path.name.startswith(f"{self.spec.name}-{release.version}-")
                       for path in (self.root / self.prefix.lstrip("/") / "releases").iterdir())
        passed = done.returncode != 0 and after == before and gone \
            and f"-{previous.version}-" in after
        result = (f"refused by its health check, rolled back: current -> {after}" if passed
                  else f"install.sh exit {done.returncode}, current {before} -> {after}: "
                       f"{_tail(done)}")
        self.runner.add(Step(name, passed, result, seconds, {"broken_s": round(seconds, 1)}))

    def rollback(self, release: Release) -> None:
        done, seconds = self._install_sh(
            "rollback", [f"{self.prefix}/current/install.sh", "--rollback"], None)
        current = self.current()
        passed = done.returncode == 0 and f"-{release.version}-" in current
        result = (f"install.sh --rollback: current -> {current}" if passed
                  else f"install.sh --rollback exit {done.returncode}: {_tail(done)}")
        self.runner.add(Step("rollback", passed, result, seconds,
                             {"rollback_s": round(seconds, 1)}))


def _tail(done: subprocess.CompletedProcess) -> str:
    lines = (done.stdout + done.stderr).strip().splitlines()
    return " | ".join(lines[-3:]) or "no output"


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data or ""


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who)
                     for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
