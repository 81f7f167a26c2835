"""Helpers of the installer's trust tests: signed builds, shims on PATH, a root's state."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from edgefuse.bundle.archive import manifest_self_digest
from edgefuse.bundle.builder import BuildOutcome, build
from tests.bundle.models import without_app, write_spec

PREFIX = "opt/edgefuse/small"
TOP = "small-1.0.0"  # the small bundle's id: its archive's one folder


def rewrite_manifest(bundle: Path, change) -> None:
    """Change MANIFEST.json's data and recompute its self-digest, as anyone can."""
    data = json.loads((bundle / "MANIFEST.json").read_text())
    change(data)
    data["manifest_sha256"] = "0" * 64
    text = json.dumps(data, indent=2) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    (bundle / "MANIFEST.json").write_text(text.replace("0" * 64, digest, 1))
    assert manifest_self_digest((bundle / "MANIFEST.json").read_text())[1] == digest


def run_install(script: Path, root: Path | None, *args: str, env: dict[str, str] | None = None,
                python: bool = False) -> subprocess.CompletedProcess:
    """install.sh ARGS, with ``--root`` unless ``root`` is None, ``--no-python`` unless asked."""
    argv = ["bash", str(script)]
    if root is not None:
        argv += ["--root", str(root)]
    if not python:
        argv.append("--no-python")
    # the health checks' window: 0 s here (the default 15 s is tested with short windows)
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "EDGEFUSE_HEALTH_WINDOW": "0",
                                            **(env or {})})


def with_member(archive: Path, path: Path, name: str, data: bytes) -> Path:
    """``archive`` written again to ``path`` with one more member after its own: ``name``, an
    executable file holding ``data`` (a planted file, or a second copy of a checked one)."""
    with tarfile.open(archive) as source, tarfile.open(path, "w:gz") as out:
        for member in source.getmembers():
            out.addfile(member, source.extractfile(member) if member.isfile() else None)
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o755
        out.addfile(info, io.BytesIO(data))
    return path


def build_version(small_build, folder: Path, version: str, *, key: Path | None = None,
                  build_number: int | None = None, prefix: str | None = None,
                  health_marker: bool = False) -> BuildOutcome:
    """The small spec at ``version``, built from the shared cache into ``folder/out``.

    ``prefix``: an install prefix and no app (no service): installs with no --root, for the
    tests of the Python environment. ``health_marker``: the service environment carries
    EDGEFUSE_BROKEN=1, which the tests' health command looks for."""
    spec = write_spec(folder / "spec", version=version)
    text = spec.read_text(encoding="utf-8")
    if prefix is not None:
        text = without_app(text) + f"install:\n  prefix: {prefix}\n"
    if health_marker:
        text = text.replace("{EDGEFUSE_LOG: info}", "{EDGEFUSE_LOG: info, EDGEFUSE_BROKEN: 1}")
    spec.write_text(text, encoding="utf-8")
    return build(spec, folder / "out", cache_dir=small_build.cache, progress=False,
                 sign_key=key, build_number=build_number)


def prefix_builds(small_build, folder: Path, *versions: str) -> tuple[Path, list[BuildOutcome]]:
    """The small bundle at each version (built into ``folder/v1``, ``v2``, ...) with no service,
    for the install prefix ``folder/board/opt/small``: an install with no --root into it writes
    nothing else of this machine (the tests of the Python environment)."""
    prefix = folder / "board" / "opt" / "small"
    return prefix, [build_version(small_build, folder / f"v{number}", version, prefix=str(prefix))
                    for number, version in enumerate(versions, 1)]

def shim(folder: Path, name: str, body: str) -> dict[str, str]:
    """A command ``name`` on PATH ahead of the real one; returns the environment to pass."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def host_python3_path() -> str:
    """This interpreter's base Python (the one the small spec's wheels are resolved for)."""
    return getattr(sys, "_base_executable", None) or shutil.which("python3")


def host_python3(tmp_path: Path) -> dict[str, str]:
    """The environment in which ``python3`` is ``host_python3_path()``: the installer builds
    real environments with it."""
    return shim(tmp_path / "bin", "python3", f'exec "{host_python3_path()}" "$@"\n')


def state(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its link target or content."""
    found = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = path.read_bytes().hex()[:64] + str(path.stat().st_size)
        else:
            found[key] = "dir"
    return found


def current_release(root: Path) -> str:
    """What ``PREFIX/current`` in ``root`` points at (``releases/<id>-<digest>``)."""
    return os.readlink(root / PREFIX / "current")
