"""The edgefuse wheel the bundle installs on the board, built from this checkout, byte-stable.

Why not ``pip wheel .``: it needs a build environment (setuptools fetched into an isolated venv),
takes seconds to tens of seconds, and its zip carries the file system's times and modes, so two
checkouts of one commit give different wheels. A pure-Python wheel is a zip of the package, a
``.dist-info`` folder (METADATA, WHEEL, entry_points.txt, top_level.txt) and a RECORD of
digests; written here with ``reproducible.write_zip`` it depends only on the package's files and
its declared metadata. The metadata comes from the checkout's ``pyproject.toml`` when there is
one (``tomllib``, Python 3.11+), else from the installed distribution's.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Any

from edgefuse._version import __version__
from edgefuse.bundle.digests import PACKAGE_DIR, tree_files
from edgefuse.bundle.reproducible import file_mode, write_zip

DISTRIBUTION = "edgefuse"
TAG = "py3-none-any"


def wheel_name() -> str:
    return f"{DISTRIBUTION}-{__version__}-{TAG}.whl"


def project_metadata() -> dict[str, Any]:
    """name, version, summary, requires_python, license, requires (with extras), scripts."""
    pyproject = PACKAGE_DIR.parent / "pyproject.toml"
    try:
        import tomllib  # noqa: PLC0415 - Python 3.11+; older ones read the installed metadata
    except ImportError:
        tomllib = None
    if tomllib is not None and pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        requires = list(project.get("dependencies", []))
        for extra, items in sorted(project.get("optional-dependencies", {}).items()):
            requires += [f'{item}; extra == "{extra}"' for item in items]
        license_text = project.get("license", {})
        return {
            "summary": project.get("description", ""),
            "requires_python": project.get("requires-python", ""),
            "license": license_text.get("text", "") if isinstance(license_text, dict) else "",
            "requires": requires,
            "extras": sorted(project.get("optional-dependencies", {})),
            "scripts": dict(sorted(project.get("scripts", {}).items())),
        }
    installed = importlib.metadata.metadata(DISTRIBUTION)
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(
        group="console_scripts") if ep.value.startswith(f"{DISTRIBUTION}.")}
    return {
        "summary": installed.get("Summary", ""),
        "requires_python": installed.get("Requires-Python", ""),
        "license": installed.get("License", ""),
        "requires": list(importlib.metadata.requires(DISTRIBUTION) or []),
        "extras": sorted(installed.get_all("Provides-Extra") or []),
        "scripts": dict(sorted(scripts.items())),
    }


def _metadata_text(meta: dict[str, Any]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {DISTRIBUTION}", f"Version: {__version__}",
             f"Summary: {meta['summary']}"]
    if meta["license"]:
        lines.append(f"License: {meta['license']}")
    if meta["requires_python"]:
        lines.append(f"Requires-Python: {meta['requires_python']}")
    lines += [f"Provides-Extra: {extra}" for extra in meta["extras"]]
    lines += [f"Requires-Dist: {item}" for item in meta["requires"]]
    return "\n".join(lines) + "\n"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode('ascii')}"


def build_wheel(output_dir: str | os.PathLike[str], epoch: int) -> Path:
    """Write ``edgefuse-<version>-py3-none-any.whl`` into ``output_dir``; returns its path."""
    meta = project_metadata()
    info = f"{DISTRIBUTION}-{__version__}.dist-info"
    entries: list[tuple[str, bytes, int]] = []
    for file in tree_files(PACKAGE_DIR):
        name = f"{DISTRIBUTION}/{file.relative_to(PACKAGE_DIR).as_posix()}"
        entries.append((name, file.read_bytes(), file_mode(file)))
    scripts = "".join(f"{name} = {target}\n" for name, target in meta["scripts"].items())
    entries += [
        (f"{info}/METADATA", _metadata_text(meta).encode("utf-8"), 0o644),
        (f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: edgefuse-build {__version__}\n"
                           f"Root-Is-Purelib: true\nTag: {TAG}\n").encode(), 0o644),
        (f"{info}/entry_points.txt", f"[console_scripts]\n{scripts}".encode(), 0o644),
        (f"{info}/top_level.txt", f"{DISTRIBUTION}\n".encode(), 0o644),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n"
                     for name, data, _ in sorted(entries))
    entries.append((f"{info}/RECORD", (record + f"{info}/RECORD,,\n").encode("utf-8"), 0o644))
    path = Path(output_dir) / wheel_name()
    write_zip(path, entries, epoch)
    return path
