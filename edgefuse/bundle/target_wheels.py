"""The board's Python packages, resolved on the build host and pinned by hash in the bundle.

Why: the service runs ``.venv/bin/edgefuse``; if that environment were filled at first boot by
pip from an index, with ``>=`` requirements and no hashes, as root, then what runs would be
whatever the index served that day, covered by no digest. Instead the build resolves edgefuse's
wheel and every dependency for the target (its CPU, libc and Python: ``pip download --platform
... --python-version ... --only-binary=:all:``) from a wheelhouse folder (``--no-index
--find-links DIR``) or, when the spec says ``wheels: download``, from the index the build host's
pip is set up for. The wheels go into the bundle's ``wheels/`` (so MANIFEST.json, and its
signature, cover them) with ``requirements.lock``: one ``name==version --hash=sha256:...`` per
wheel, which ``install.sh`` hands to ``pip install --no-index --require-hashes``. A spec with no
wheels for its target is refused before any model is built (``spec_schema``: ``python`` is
required) and a wheelhouse that lacks a dependency for the target stops the build with pip's
own reason: no bundle exists that would need an index on the board.

pip is the engine that resolves (it reads every wheel's metadata and the target's tags), run as
``python -m pip`` of the build host; nothing here reimplements its tag or version logic.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgefuse.errors import InputError, Ref
from edgefuse.manifest import file_sha256

WHEELS_DIR = "wheels"
LOCK_FILE = "requirements.lock"
DOWNLOAD = "download"  # python.wheels: fetch from the build host's index instead of a folder
DEFAULT_PLATFORMS = ("manylinux2014_aarch64",)
# name-version(-build)?-python-abi-platform.whl (PEP 427); the name has no '-'
_WHEEL_NAME = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)"
                         r"(-[0-9][A-Za-z0-9_.]*)?-[^-]+-[^-]+-[^-]+\.whl\Z")


def target_python(spec_python: dict[str, Any], spec_dir: Path) -> dict[str, Any]:
    """The spec's ``python`` section with defaults: version, platforms, wheels (a folder Path,
    or ``DOWNLOAD``)."""
    platform = spec_python.get("platform", list(DEFAULT_PLATFORMS))
    wheels = spec_python["wheels"]
    return {"version": str(spec_python["version"]),
            "platforms": [platform] if isinstance(platform, str) else list(platform),
            "wheels": DOWNLOAD if wheels == DOWNLOAD else spec_dir / wheels}


def download_command(python: dict[str, Any], app_wheel: Path, dest: Path) -> list[str]:
    """The ``pip download`` that fetches ``app_wheel``'s dependency closure for the target.

    From a wheelhouse: ``--isolated --no-index --find-links DIR`` (no configuration or
    environment of the build host adds a source); with ``download``: the host's pip settings
    (PIP_INDEX_URL, pip.conf) choose the index."""
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
            "--no-input", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", python["version"], "--implementation", "cp"]
    for platform in python["platforms"]:
        argv += ["--platform", platform]
    if python["wheels"] != DOWNLOAD:
        argv[3:3] = ["--isolated"]
        argv += ["--no-index", "--find-links", str(python["wheels"])]
    return [*argv, str(app_wheel)]


def fetch_wheels(python: dict[str, Any], app_wheel: Path, dest: Path) -> list[Path]:
    """Run ``download_command`` into ``dest``; every wheel the target needs, or InputError."""
    source = ("the index" if python["wheels"] == DOWNLOAD
              else f"the wheelhouse '{python['wheels']}'")
    argv = download_command(python, app_wheel, dest)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-4:])
        raise InputError(
            f"{source} lacks wheels for the target (Python {python['version']}, "
            f"{', '.join(python['platforms'])}); the bundle would have to reach an index on the "
            "board, so nothing was built",
            context=f"$ {' '.join(argv[2:])}\n{tail}",
            hint="add the missing wheels for the board (pip download --platform ... "
                 "--python-version ... --only-binary=:all: -d WHEELHOUSE PACKAGE), or set "
                 "python.wheels: download on a host that reaches an index",
            reference=Ref.NO_TARGET_WHEELS)
    return sorted(dest.glob("*.whl"))


def wheel_identity(filename: str) -> tuple[str, str]:
    """(normalized project name, version) of a wheel file name."""
    found = _WHEEL_NAME.match(filename)
    if found is None:
        raise InputError(f"'{filename}' is not a wheel file name (PEP 427)",
                         reference=Ref.NO_TARGET_WHEELS)
    return re.sub(r"[-_.]+", "-", found["name"]).lower(), found["version"]


def lock_text(wheels: list[Path]) -> str:
    """``requirements.lock``: every wheel as ``name==version --hash=sha256:HEX``, by name."""
    lines = [f"{name}=={version} --hash=sha256:{file_sha256(wheel)}"
             for (name, version), wheel in sorted((wheel_identity(w.name), w) for w in wheels)]
    return ("# The board's Python environment, exactly: install.sh runs pip install --no-index "
            f"--find-links {WHEELS_DIR}/ --require-hashes -r {LOCK_FILE}\n"
            + "".join(f"{line}\n" for line in lines))


def lock_problems(bundle: Path) -> list[str]:
    """Where ``requirements.lock`` and ``wheels/`` of a bundle disagree (empty when they match)."""
    lock = bundle / LOCK_FILE
    if not lock.is_file():
        return [f"{LOCK_FILE} is missing"]
    pinned: dict[str, str] = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            requirement, _, digest = line.partition(" --hash=sha256:")
            pinned[requirement] = digest
    found = {}
    for wheel in sorted((bundle / WHEELS_DIR).glob("*.whl")):
        found["==".join(wheel_identity(wheel.name))] = file_sha256(wheel)
    problems = [f"{name} is locked but has no wheel" for name in sorted(pinned.keys() - found)]
    problems += [f"{name} has a wheel but is not locked" for name in sorted(found.keys() - pinned)]
    problems += [f"{name}: the wheel's sha256 is not the locked one"
                 for name in sorted(set(found) & set(pinned)) if found[name] != pinned[name]]
    return problems
