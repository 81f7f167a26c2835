"""One small bundle, built once for every build test (two ONNX-file models, no PyTorch); and a
guard that fails any test here which changes this machine's users or what an install without
``--root`` writes (install.sh creates the service user and enables units on the machine it runs
on: a test must run it into a temporary root, or with shims, never on the host).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefuse.bundle.archive import write_bundle_manifest
from edgefuse.bundle.builder import BuildOutcome, build
from edgefuse.bundle.signing import new_key_pair
from tests.bundle.models import write_spec


@dataclasses.dataclass(frozen=True)
class SmallBuild:
    spec_dir: Path
    cache: Path
    outcome: BuildOutcome

    @property
    def bundle(self) -> Path:
        return self.outcome.bundle_dir

    @property
    def archive(self) -> Path:
        return self.outcome.archive

    @property
    def install_sh(self) -> Path:
        return self.outcome.output_dir / "install.sh"


@pytest.fixture(scope="session")
def small_build(tmp_path_factory) -> SmallBuild:
    root = tmp_path_factory.mktemp("small")
    spec = write_spec(root / "spec")
    cache = root / "cache"
    outcome = build(spec, root / "out", cache_dir=cache, progress=False)
    return SmallBuild(spec.parent, cache, outcome)


@pytest.fixture
def root(tmp_path) -> Path:
    """An empty root file system for ``install.sh --root`` (a systemd unit folder only)."""
    folder = tmp_path / "root"
    (folder / "etc" / "systemd" / "system").mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """(private, public) PEM key pairs: the publisher's (``release``) and an attacker's."""
    folder = tmp_path_factory.mktemp("keys")
    return {name: new_key_pair(folder, name) for name in ("release", "attacker")}


@pytest.fixture
def hand_bundle(tmp_path) -> Path:
    """A bundle made by hand (``hand-1.0.0``: one app file, no model) with a real MANIFEST.json
    and its self-digest, for the ``bundle verify`` tests that put in one defect at a time."""
    folder = tmp_path / "hand-1.0.0"
    (folder / "app").mkdir(parents=True)
    (folder / "app" / "config.yaml").write_text("conf: 0.3\n")
    write_bundle_manifest(folder, {"bundle": {"name": "hand", "version": "1.0.0",
                                              "id": folder.name}, "models": {}})
    return folder


# ---- the host stays as it was -------------------------------------------------------------------

ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow")
# what an install without --root writes on the machine: folders listed to this depth
HOST_INSTALL_PATHS = {"/etc/systemd/system": 2, "/etc/edgefuse": 2, "/opt/edgefuse": 3,
                      "/usr/local/sbin": 1}
# the commands that change users or a live systemd: refused on PATH during every test here
REFUSED_COMMANDS = ("useradd", "groupadd", "usermod", "groupmod", "userdel", "groupdel",
                    "adduser", "addgroup", "systemctl")


def _listing(path: Path, depth: int) -> list[tuple[str, str]]:
    """Every entry under ``path`` to ``depth`` levels: a link's target, else its inode, size
    and modification time (a file replaced by rename or rewritten shows)."""
    found = []
    try:
        entries = sorted(os.scandir(path), key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        if entry.is_symlink():
            found.append((entry.path, "-> " + os.readlink(entry.path)))
            continue
        info = entry.stat(follow_symlinks=False)
        found.append((entry.path, f"{info.st_ino} {info.st_size} {info.st_mtime_ns}"))
        if depth > 1 and entry.is_dir(follow_symlinks=False):
            found += _listing(Path(entry.path), depth - 1)
    return found


def host_state() -> dict[str, object]:
    """The host's account files (digests) and the folders an install without --root writes."""
    state: dict[str, object] = {}
    for name in ACCOUNT_FILES:
        path = Path(name)
        state[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    for name, depth in HOST_INSTALL_PATHS.items():
        state[name] = _listing(Path(name), depth)
    return state


@pytest.fixture(scope="session")
def refused_commands(tmp_path_factory) -> Iterator[Path]:
    """REFUSED_COMMANDS first on PATH for this session, each recording its call in the log it
    returns and failing (exit 97) instead of changing the machine."""
    folder = tmp_path_factory.mktemp("refused-commands")
    log = folder / "calls.log"
    log.touch()
    for name in REFUSED_COMMANDS:
        shim = folder / name
        shim.write_text(f'''#!/bin/bash
printf '%s\\n' "{name} $*" >> {log}
echo "{name}: refused by tests/bundle/conftest.py: a test must not change this machine" >&2
exit 97
''', encoding="utf-8")
        shim.chmod(0o755)
    saved = os.environ["PATH"]
    os.environ["PATH"] = f"{folder}{os.pathsep}{saved}"
    yield log
    os.environ["PATH"] = saved


@pytest.fixture(autouse=True)
def host_untouched(refused_commands):
    """Fails the test that changed the host's users, groups or install paths, or that ran one
    of REFUSED_COMMANDS (named with its arguments)."""
    before = host_state()
    seen = refused_commands.stat().st_size
    yield
    with refused_commands.open(encoding="utf-8") as log:
        log.seek(seen)
        calls = log.read().splitlines()
    after = host_state()
    changed = [name for name in before if before[name] != after[name]]
    if calls or changed:
        pytest.fail("the test changed this machine or tried to: "
                    + "; ".join([*(f"ran `{call}`" for call in calls),
                                 *(f"{name} changed" for name in changed)])
                    + " (run install.sh with --root into a temporary root, or put shims for "
                    "these commands first on PATH)", pytrace=False)
