"""qemu-user through binfmt_misc: what lets an x86-64 host run an aarch64 root file system.

Why qemu-user 10 or later: qemu-user 7.2 (Debian 12's) segfaults importing onnxruntime 1.3x for
aarch64 under every ``-cpu`` model, and a rehearsal that crashes where the board would not proves
nothing; 10.0 (Debian 13's ``qemu-user``, a static binary) imports and runs it. An older qemu is
refused with its version before anything starts.

Why registered here, with flags ``PF``: ``F`` (fix binary) makes the kernel open the interpreter
once, at registration, so aarch64 programs run inside a chroot that holds no qemu; ``P`` keeps
each program's ``argv[0]`` (a login shell's ``-bash``, a venv's ``python``). The entry has a name
of its own (``edgefuse-aarch64``) and is left registered, as binfmt-support leaves its entries; an
older entry of that name with another interpreter is replaced. Another enabled entry for aarch64
programs (a distribution's ``qemu-aarch64``) is refused by name: the kernel takes the entry
registered last, so which qemu would run could change under the rehearsal. The kernel's format:
https://docs.kernel.org/admin-guide/binfmt-misc.html
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

from edgefuse.errors import InputError, Ref

MIN_QEMU = (10, 0)
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
ENTRY = "edgefuse-aarch64"
FLAGS = "PF"
# the ELF header of an aarch64 executable or shared object (qemu's scripts/qemu-binfmt-conf.sh)
AARCH64_MAGIC = bytes.fromhex("7f454c460201010000000000000000000200b700")
AARCH64_MASK = bytes.fromhex("ffffffffffffff00fffffffffffffffffeffffff")
QEMU_NAMES = ("qemu-aarch64-static", "qemu-aarch64")
_VERSION = re.compile(r"version (\d+)\.(\d+)(?:\.(\d+))?")
_HINT = ("install qemu-user 10 or later (Debian 13's qemu-user: .ci/qemu-user.sh takes it from "
         "the machine's own Debian mirror) or pass --qemu PATH to a qemu-aarch64 >= 10")


@dataclasses.dataclass(frozen=True)
class Qemu:
    path: Path
    version: tuple[int, ...]

    @property
    def version_text(self) -> str:
        return ".".join(str(part) for part in self.version)


@dataclasses.dataclass(frozen=True)
class BinfmtEntry:
    name: str
    enabled: bool
    interpreter: str
    flags: str
    magic: bytes
    mask: bytes


def qemu_at(path: str | os.PathLike[str]) -> Qemu:
    """The qemu-aarch64 at ``path`` and its version; a user error when it is none."""
    where = Path(path)
    try:
        done = subprocess.run([str(where), "--version"], capture_output=True, text=True,
                              timeout=30, check=False)
    except OSError as exc:
        raise InputError(f"'{where}' cannot be run as qemu-aarch64 ({exc.strerror})",
                         hint=_HINT, reference=Ref.QEMU_TOO_OLD) from exc
    found = _VERSION.search(done.stdout)
    if done.returncode != 0 or "qemu" not in done.stdout.lower() or found is None:
        raise InputError(f"'{where}' is not qemu-aarch64: `{where} --version` said "
                         f"{(done.stdout or done.stderr).strip()[:200]!r}",
                         hint=_HINT, reference=Ref.QEMU_TOO_OLD)
    return Qemu(where.resolve(), tuple(int(part) for part in found.groups() if part is not None))


def find_qemu(given: str | os.PathLike[str] | None = None) -> Qemu:
    """``given``, else the first qemu-aarch64 >= 10 on PATH; older ones are named in the error."""
    if given is not None:
        qemu = qemu_at(given)
        _check_version(qemu)
        return qemu
    seen: list[Qemu] = []
    for name in QEMU_NAMES:
        path = shutil.which(name)
        if path is None:
            continue
        qemu = qemu_at(path)
        if qemu.version >= MIN_QEMU:
            return qemu
        seen.append(qemu)
    if seen:
        _check_version(seen[0])
    raise InputError("no qemu-aarch64 on PATH (the aarch64 rehearsal runs the root under "
                     "qemu-user through binfmt_misc)", hint=_HINT, reference=Ref.QEMU_TOO_OLD)


def _check_version(qemu: Qemu) -> None:
    if qemu.version < MIN_QEMU:
        raise InputError(
            f"{qemu.path} is qemu-user {qemu.version_text}; the rehearsal needs "
            f"{MIN_QEMU[0]} or later (qemu-user 7.2 segfaults importing onnxruntime 1.3x for "
            "aarch64, so an older qemu would fail bundles the board runs)",
            hint=_HINT, reference=Ref.QEMU_TOO_OLD)


def mount_binfmt_misc(folder: Path = BINFMT_DIR) -> None:
    """Mount binfmt_misc where it is not mounted yet; a user error where it cannot be."""
    if (folder / "register").exists():
        return
    done = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (folder / "register").exists():
        raise InputError(
            f"binfmt_misc cannot be mounted on {folder}: {done.stderr.strip() or 'no register'}",
            hint="run as root on a kernel with binfmt_misc (a container needs --privileged or "
                 "the host's binfmt_misc); without it no aarch64 program can run here",
            reference=Ref.NO_BINFMT_MISC)


def read_entries(folder: Path = BINFMT_DIR) -> list[BinfmtEntry]:
    """Every registered binfmt_misc entry."""
    entries = []
    for path in sorted(folder.iterdir()):
        if path.name in ("register", "status"):
            continue
        fields: dict[str, str] = {}
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for line in lines[1:]:
            key, _, value = line.partition(" ")
            fields[key.rstrip(":")] = value.strip()
        entries.append(BinfmtEntry(
            name=path.name, enabled=bool(lines) and lines[0] == "enabled",
            interpreter=fields.get("interpreter", ""), flags=fields.get("flags", ""),
            magic=_hex(fields.get("magic", "")), mask=_hex(fields.get("mask", ""))))
    return entries


def _hex(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return b""


def registration_line(qemu: Qemu) -> bytes:
    """What ``register`` takes: ``:name:M::magic:mask:interpreter:flags``, escaped as ``\\xHH``."""
    def escaped(data: bytes) -> bytes:
        return b"".join(b"\\x%02x" % byte for byte in data)

    return (b":" + ENTRY.encode() + b":M::" + escaped(AARCH64_MAGIC) + b":"
            + escaped(AARCH64_MASK) + b":" + os.fsencode(qemu.path) + b":" + FLAGS.encode())


def register(qemu: Qemu, folder: Path = BINFMT_DIR) -> str:
    """Make ``qemu`` the interpreter of aarch64 programs; says what it did."""
    mount_binfmt_misc(folder)
    entries = read_entries(folder)
    others = [entry for entry in entries if entry.enabled and entry.name != ENTRY
              and _runs_aarch64(entry) and not _same_file(entry.interpreter, qemu.path)]
    if others:
        listed = ", ".join(f"{entry.name} ({entry.interpreter})" for entry in others)
        raise InputError(
            f"binfmt_misc already runs aarch64 programs with another interpreter: {listed}",
            hint="disable it while rehearsing (" + "; ".join(
                f"echo 0 > {folder / entry.name}" for entry in others) + "; `echo 1` enables "
                "it again), or pass that interpreter with --qemu if it is qemu-aarch64 >= 10",
            reference=Ref.BINFMT_CONFLICT)
    ours = next((entry for entry in entries if entry.name == ENTRY), None)
    if ours is not None and ours.enabled and _same_file(ours.interpreter, qemu.path) \
            and set(FLAGS) <= set(ours.flags):
        return f"binfmt_misc entry {ENTRY} runs {qemu.path} (qemu {qemu.version_text})"
    try:
        if ours is not None:
            (folder / ENTRY).write_text("-1")
        (folder / "register").write_bytes(registration_line(qemu))
    except OSError as exc:
        raise InputError(f"cannot register {qemu.path} with binfmt_misc ({exc.strerror})",
                         hint="run as root; in a container, binfmt_misc is the host's",
                         reference=Ref.NO_BINFMT_MISC) from exc
    return (f"registered {qemu.path} (qemu {qemu.version_text}) as binfmt_misc entry {ENTRY} "
            f"(flags {FLAGS})" + (", replacing the older one" if ours is not None else ""))


def _runs_aarch64(entry: BinfmtEntry) -> bool:
    """Whether the entry's magic and mask take an aarch64 ELF header."""
    if not entry.magic or len(entry.mask) not in (0, len(entry.magic)):
        return False
    mask = entry.mask or b"\xff" * len(entry.magic)
    header = AARCH64_MAGIC.ljust(len(entry.magic), b"\0")
    return all((h & m) == (e & m) for h, e, m in zip(header, entry.magic, mask, strict=True))


def _same_file(first: str, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False

