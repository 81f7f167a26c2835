"""The aarch64 root file system a rehearsal runs in: made once by debootstrap, cached, kept clean.

Why Debian 12 arm64 by debootstrap: it is the closest system this network reaches to the board's
Ubuntu 22.04 for aarch64, with a glibc (2.36) and a python3 (3.11) of the same generation; a board
image's own root file system, where the user has one, replaces it (``--rootfs``).

Why cached by suite, architecture, variant and package list: debootstrap under qemu takes minutes
(docs/fleet.md has the figures), and an equal recipe gives an equal root. The root is made in a
temporary folder beside its final place and renamed there only once debootstrap finished, so a
killed run never leaves a half-made root that a later run would take.

Why each run gets an overlay (or, where overlayfs cannot mount, a copy): installs write a Python
environment, users and service state into the root, and the next rehearsal must start from the
same clean system. /proc, /sys and /dev are bound into the run's root (onnxruntime's cpuinfo
aborts without /sys) and unmounted however the run ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from edgefuse.bundle.digests import key_of
from edgefuse.errors import InputError, Ref

log = logging.getLogger(__name__)

RECIPE_VERSION = 1  # bumped when the way roots are made changes: old cache entries go unused
ROOT_FOLDER = "rootfs"
RECORD = "record.json"
BINDS = ("proc", "sys", "dev")
DEBOOTSTRAP_TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class RootRecipe:
    """What debootstrap is asked for; its digest names the cached root."""

    suite: str = "bookworm"
    arch: str = "arm64"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3", "python3-venv", "openssl", "ca-certificates")

    @property
    def name(self) -> str:
        key = key_of({"recipe": RECIPE_VERSION, "suite": self.suite, "arch": self.arch,
                      "variant": self.variant, "packages": sorted(self.packages)})
        return f"{self.suite}-{self.arch}-{key[:16]}"


def rehearsal_cache() -> Path:
    """``$XDG_CACHE_HOME/edgefuse/rehearsal`` (``~/.cache/edgefuse/rehearsal``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgefuse" / "rehearsal"


def debian_mirror(apt_dir: Path = Path("/etc/apt"),
                  os_release: Path = Path("/etc/os-release")) -> str:
    """The Debian mirror this machine's own apt sources use (never a host name of ours).

    Only a Debian host's sources serve Debian's suites; elsewhere the user names a mirror."""
    release = _os_release(os_release)
    codename = release.get("VERSION_CODENAME", "")
    if release.get("ID") == "debian" and codename:
        for uri, suites in _apt_sources(apt_dir):
            if codename in suites:
                return uri
    raise InputError(
        f"no Debian mirror in this machine's apt sources ({apt_dir}; the host is "
        f"{release.get('PRETTY_NAME', 'not Debian')}) to make the arm64 root from",
        hint="pass --mirror URL (a Debian mirror, e.g. the one your organisation uses) or "
             "--rootfs DIR (the board image's root file system)",
        reference=Ref.ROOTFS_FAILED)


def _os_release(path: Path) -> dict[str, str]:
    values = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip('"')
    return values


def _apt_sources(apt_dir: Path) -> Iterator[tuple[str, set[str]]]:
    """(URI, suites) of every 'deb' source: deb822 ``*.sources`` files and one-line lists."""
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() \
                    and fields.get("enabled", "yes").lower() != "no":
                for uri in fields.get("uris", "").split():
                    yield uri, set(fields.get("suites", "").split())
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                yield words[1], {words[2]}


@dataclasses.dataclass(frozen=True)
class CachedRoot:
    rootfs: Path
    made: bool  # False: taken from the cache
    seconds: float


def cached_root(recipe: RootRecipe, mirror: str, cache: Path | None = None) -> CachedRoot:
    """The cached root of ``recipe``, made now (debootstrap under qemu) when there is none."""
    start = time.monotonic()
    roots = (cache or rehearsal_cache()) / "roots"
    final = roots / recipe.name
    if (final / RECORD).is_file() and (final / ROOT_FOLDER / "usr" / "bin").is_dir():
        return CachedRoot(final / ROOT_FOLDER, False, time.monotonic() - start)
    roots.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(roots)
    staging = roots / f".{recipe.name}.{os.getpid()}.partial"
    remove_tree(staging)
    try:
        _debootstrap(recipe, mirror, staging / ROOT_FOLDER)
        (staging / RECORD).write_text(json.dumps({
            **dataclasses.asdict(recipe), "recipe": RECIPE_VERSION, "mirror": mirror,
            "seconds": round(time.monotonic() - start, 1),
            "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2) + "\n")
        try:
            staging.rename(final)
        except OSError:
            if not (final / RECORD).is_file():  # not a concurrent run that finished first
                raise
    finally:
        remove_tree(staging)
    return CachedRoot(final / ROOT_FOLDER, True, time.monotonic() - start)


def _debootstrap(recipe: RootRecipe, mirror: str, target: Path) -> None:
    """Both of debootstrap's stages: download and unpack here, configure inside under qemu."""
    if shutil.which("debootstrap") is None:
        raise InputError("debootstrap is not installed (it makes the arm64 root)",
                         hint="apt-get install debootstrap, or pass --rootfs DIR",
                         reference=Ref.ROOTFS_FAILED)
    target.mkdir(parents=True)
    first = ["debootstrap", "--foreign", f"--arch={recipe.arch}", f"--variant={recipe.variant}",
             f"--include={','.join(recipe.packages)}", recipe.suite, str(target), mirror]
    second = ["chroot", str(target), "/debootstrap/debootstrap", "--second-stage"]
    for argv in (first, second):
        log.info("running %s", " ".join(argv))
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=DEBOOTSTRAP_TIMEOUT_S, env=plain_environment())
        finally:
            unmount_under(target)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            debootstrap_log = target / "debootstrap" / "debootstrap.log"
            if debootstrap_log.is_file():
                tail += "\n" + "\n".join(debootstrap_log.read_text(
                    errors="replace").strip().splitlines()[-8:])
            raise InputError(
                f"debootstrap failed making the {recipe.suite} {recipe.arch} root "
                f"(exit {done.returncode})", context=tail,
                hint="check the mirror (--mirror) and the network; nothing was cached",
                reference=Ref.ROOTFS_FAILED)
    for package in (target / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        package.unlink()  # unpacked already: the cache need not keep them twice


def plain_environment() -> dict[str, str]:
    """A fixed environment for programs run in the root: the host's locale or PYTHONPATH must
    not leak into an aarch64 system that has neither."""
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8", "HOME": "/root", "TERM": "dumb"}


def _remove_abandoned(roots: Path) -> None:
    """Partial roots of runs that died (their process is gone)."""
    for partial in roots.glob(".*.partial"):
        pid = partial.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_tree(partial)


def mounts_under(folder: Path) -> list[Path]:
    """Mount points at or below ``folder``, deepest first."""
    prefix = os.path.realpath(folder)
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def unmount_under(folder: Path) -> None:
    """Unmount everything mounted at or below ``folder`` (lazily where a mount is busy)."""
    for point in mounts_under(folder):
        if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def remove_tree(folder: Path) -> None:
    """Remove ``folder`` without ever following a mount out of it."""
    if not folder.exists() and not folder.is_symlink():
        return
    unmount_under(folder)
    if mounts_under(folder):
        raise InputError(f"'{folder}' still has file systems mounted in it; not removing it",
                         hint=f"unmount them (findmnt -R {folder}) and run again",
                         reference=Ref.ROOTFS_FAILED)
    subprocess.run(["rm", "-rf", "--one-file-system", str(folder)], check=True)


class RunRoot:
    """A writable root over ``lower`` for one run, with /proc, /sys and /dev bound in.

    A context manager: leaving it (an error, Ctrl-C) unmounts everything and removes the
    run's writes; ``lower`` is never written."""

    def __init__(self, lower: Path, folder: Path, *, overlay: bool = True) -> None:
        self.lower = lower
        self.folder = folder
        self.path = folder / "root"
        self.how = ""
        self._overlay = overlay

    def __enter__(self) -> RunRoot:
        remove_tree(self.folder)
        self.path.mkdir(parents=True)
        try:
            self.how = self._writable()
            for name in BINDS:
                self._bind(Path("/") / name, self.path / name)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        kill_processes_in(self.path)
        remove_tree(self.folder)

    def _writable(self) -> str:
        if self._overlay:
            upper, work = self.folder / "upper", self.folder / "work"
            upper.mkdir()
            work.mkdir()
            options = f"lowerdir={self.lower},upperdir={upper},workdir={work}"
            done = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options,
                                   str(self.path)], capture_output=True, text=True, check=False)
            if done.returncode == 0:
                return "overlay"
            log.warning("overlayfs refused (%s): copying the root instead", done.stderr.strip())
            remove_tree(upper)
            remove_tree(work)
        subprocess.run(["cp", "-a", "--reflink=auto", f"{self.lower}/.", str(self.path)],
                       check=True)
        return "copy"

    @staticmethod
    def _bind(source: Path, target: Path) -> None:
        target.mkdir(exist_ok=True)
        for argv in (["mount", "--rbind", str(source), str(target)],
                     ["mount", "--make-rslave", str(target)]):  # unmounts stay in the root
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise InputError(f"cannot bind {source} into the root: {done.stderr.strip()}",
                                 hint="run as root", reference=Ref.ROOTFS_FAILED)


def kill_processes_in(root: Path) -> list[int]:
    """SIGKILL every process whose root directory is ``root`` or below (what a Ctrl-C or a
    timeout left running there); their ids."""
    prefix = os.path.realpath(root)
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            where = os.readlink(entry / "root")
        except OSError:
            continue  # gone meanwhile
        if where == prefix or where.startswith(prefix + "/"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


def run_in_root(root: Path, argv: Sequence[str], *, timeout: float,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``argv`` run inside ``root`` (chroot) as root, with a plain environment; on a timeout
    or an interrupt, everything it started there is killed."""
    try:
        return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True,
                              timeout=timeout, check=False,
                              env={**plain_environment(), **(env or {})})
    except BaseException:
        kill_processes_in(root)
        raise
