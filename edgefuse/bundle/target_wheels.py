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

The target's tags come from the board (``boards``: every ``manylinux_2_X`` its glibc allows, the
list pip computes on the board itself), not one fixed tag; what pip resolves is edgefuse's wheel
with the extras the app needs (``app_requirements``). pip is the engine that resolves (it reads
every wheel's metadata and matches the tags), run as ``python -m pip`` of the build host;
nothing here reimplements its version logic. When it finds no wheel for a requirement, the error
says which, the tags tried and the newest version the source has for them (pip's own "from
versions" list), so that a tag or version problem is not mistaken for a missing index.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgefuse.bundle.boards import BOARDS, DEFAULT_BOARD, Board, platform_tags
from edgefuse.errors import InputError, Ref
from edgefuse.manifest import file_sha256

WHEELS_DIR = "wheels"
LOCK_FILE = "requirements.lock"
DOWNLOAD = "download"  # python.wheels: fetch from the build host's index instead of a folder
# name-version(-build)?-python-abi-platform.whl (PEP 427); the name has no '-'
_WHEEL_NAME = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)"
                         r"(-[0-9][A-Za-z0-9_.]*)?-[^-]+-[^-]+-[^-]+\.whl\Z")
# pip's report of a requirement it found no file for (as pip 23 words it; the "from
# versions" list holds only versions with a file for the tags and Python given)
_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (?P<req>.+?)"
                        r"(?: \(from (?P<by>[^)]*)\))? \(from versions: (?P<versions>[^)]*)\)")


def target_python(spec_python: dict[str, Any], target: dict[str, Any],
                  spec_dir: Path) -> dict[str, Any]:
    """The spec's ``python`` section with what the board implies: version (the board's python3
    unless stated), platforms (every tag its glibc and CPU allow, unless ``platform`` says),
    wheels (a folder Path, or ``DOWNLOAD``), extras (edgefuse's extras the spec asks for
    besides those its app needs), board (its name, os, arch, glibc)."""
    board = board_of(target, spec_python.get("version"))
    platform = spec_python.get("platform")
    if platform is None:
        platforms = board.platforms
    else:
        platforms = [platform] if isinstance(platform, str) else list(platform)
    wheels = spec_python["wheels"]
    return {"version": str(spec_python.get("version", board.python)),
            "platforms": platforms,
            "wheels": DOWNLOAD if wheels == DOWNLOAD else spec_dir / wheels,
            "extras": sorted(set(spec_python.get("extras", []))),
            "board": {"name": board.name, "os": board.os, "arch": board.arch,
                      "glibc": board.glibc}}


def board_of(target: dict[str, Any], python_version: str | None) -> Board:
    """The table's row for ``target.board``, or the board the spec describes (glibc, arch and
    python.version: ``spec_checks`` has made sure they are there)."""
    name = target.get("board", DEFAULT_BOARD)
    if name in BOARDS:
        return BOARDS[name]
    return Board(name, str(target.get("os", "described in the spec")), target["arch"],
                 target["glibc"], str(python_version))


def requirement(app_wheel: Path, extras: list[str]) -> str:
    """What pip resolves: edgefuse's wheel with the extras the bundle needs (``wheel[a,b]``)."""
    return f"{app_wheel}[{','.join(extras)}]" if extras else str(app_wheel)


def download_command(python: dict[str, Any], requirement_text: str, dest: Path) -> list[str]:
    """The ``pip download`` that fetches the closure of ``requirement_text`` for the target.

    From a wheelhouse: ``--isolated --no-index --find-links DIR`` (no configuration or
    environment of the build host adds a source); with ``download``: the host's pip settings
    (PIP_INDEX_URL, pip.conf) choose the index."""
    return [*_pip("download", python), "--dest", str(dest), requirement_text]


def _pip(verb: str, python: dict[str, Any]) -> list[str]:
    argv = [sys.executable, "-m", "pip", verb, "--disable-pip-version-check", "--no-input",
            "--only-binary=:all:", "--python-version", python["version"], "--implementation",
            "cp"]
    for platform in python["platforms"]:
        argv += ["--platform", platform]
    if python["wheels"] != DOWNLOAD:
        argv[3:3] = ["--isolated"]
        argv += ["--no-index", "--find-links", str(python["wheels"])]
    return argv


def fetch_wheels(python: dict[str, Any], requirement_text: str, dest: Path) -> list[Path]:
    """Run ``download_command`` into ``dest``; every wheel the target needs, or InputError that
    says which requirement has no wheel for the target's tags and the newest version that has."""
    argv = download_command(python, requirement_text, dest)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise _no_wheels(python, argv, done.stderr or done.stdout)
    return sorted(dest.glob("*.whl"))


def _target_text(python: dict[str, Any]) -> str:
    board = python["board"]
    return (f"Python {python['version']} on {board['name']} ({board['os']}, {board['arch']}, "
            f"glibc {board['glibc']})")


def _no_wheels(python: dict[str, Any], argv: list[str], output: str) -> InputError:
    """The refusal of a resolution that failed: per requirement pip found no file for, the
    versions the source has for the target's tags; else pip's own last lines."""
    source = ("the index" if python["wheels"] == DOWNLOAD
              else f"the wheelhouse '{python['wheels']}'")
    tags = python["platforms"]
    tags_text = (f"{len(tags)} platform tags, {tags[0]} ... {tags[-1]}" if len(tags) > 3
                 else ", ".join(tags))
    command = f"$ {' '.join(argv[2:])}"
    tail = "\n".join(output.strip().splitlines()[-4:])
    missing = [(found["req"], found["by"], [v.strip() for v in found["versions"].split(",")
                                            if v.strip() and v.strip() != "none"])
               for found in _NOT_FOUND.finditer(output)]
    if not missing:
        return InputError(
            f"pip could not resolve the board's wheels from {source} for {_target_text(python)}",
            context=f"tags tried: {', '.join(tags)}\n{command}\n{tail}",
            hint="read pip's reason above: a conflict between requirements, or the index could "
                 "not be reached (PIP_INDEX_URL, pip.conf)",
            reference=Ref.NO_TARGET_WHEELS)
    lines, causes = [], set()
    for req, by, versions in missing:
        name = re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]
        extra = re.search(r"""extra == ["']([^"']+)["']""", req)
        needed = (f"{req.partition(';')[0].strip()}{f' (required by {by}' if by else ''}"
                  f"{f', its {extra[1]} extra' if extra and by else ''}{')' if by else ''}")
        if versions:
            lines.append(f"{needed}: the newest {name} {source} has for these tags is "
                         f"{versions[-1]} (it has {', '.join(versions[-5:])})")
            causes.add("version")
        else:
            lines.append(f"{needed}: {source} has no {name} wheel for these tags at all"
                         f"{_elsewhere(python, name)}")
            causes.add("tags")
    if causes == {"version"}:
        why = (f"{source} is reachable and has these packages, but no version the requirement "
               "allows is built for these tags: the cause is the target (its Python, glibc "
               "and CPU) or the version bound, not the index")
    else:
        why = (f"nothing was found for these tags in {source}: check the name and, for "
               "python.wheels: download, that pip's index (PIP_INDEX_URL, pip.conf) holds it")
    board = python["board"]
    if tags != platform_tags(board["arch"], board["glibc"]):
        why += (f"; python.platform narrows the tags: without it the build takes every tag "
                f"glibc {board['glibc']} allows")
    return InputError(
        f"no wheel of {', '.join(req.partition(';')[0].strip() for req, _, _ in missing)} for "
        f"{_target_text(python)} "
        f"({tags_text}); the bundle would have to reach an index on the board, so nothing was "
        "built",
        context="\n".join([*lines, why, f"tags tried: {', '.join(tags)}", command, tail]),
        hint="name the board the bundle is for (target.board) or its glibc and Python; add the "
             "wheels to the wheelhouse (pip download --only-binary=:all: --python-version X.Y "
             "--platform TAG ... -d WHEELHOUSE PACKAGE); or pin a version that has wheels for "
             "the board",
        reference=Ref.NO_TARGET_WHEELS)


def _elsewhere(python: dict[str, Any], name: str) -> str:
    """What the source has of ``name`` for other targets: a wheelhouse's file names, or
    whether the index knows the project at all (``pip index versions``, this host's tags)."""
    if python["wheels"] != DOWNLOAD:
        normal = re.sub(r"[-_.]+", "_", name).lower()
        files = sorted(path.name for path in Path(python["wheels"]).glob("*.whl")
                       if re.sub(r"[-_.]+", "_", path.name.split("-")[0]).lower() == normal)
        return f" (its {name} wheels: {', '.join(files)})" if files else f" (it has no {name})"
    argv = [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
            "--no-input", name]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    found = re.search(r"Available versions: (.*)", done.stdout)
    if found:
        newest = found[1].split(",")[0].strip()
        return (f" (the index has {name}, up to {newest} for this build host's platform: the "
                "cause is the target's tags, not the index)")
    return f" (nor for this build host: the index has no project named {name})"


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
