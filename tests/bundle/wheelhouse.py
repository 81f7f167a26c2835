"""Wheelhouses for the build tests: stand-in wheels of edgefuse's dependencies, no network.

Each stand-in is a real wheel pip installs (METADATA, WHEEL, RECORD) carrying no module, at the
lowest version edgefuse's requirement allows, so that the board's environment resolves and
installs offline here exactly as it will from real aarch64 wheels; the modules themselves come
from this test environment. Written with ``reproducible.write_zip``: the same bytes every time,
so two builds of the small spec still give the same archive.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from edgefuse.bundle.reproducible import DEFAULT_EPOCH, write_zip
from edgefuse.bundle.spec_schema import BUNDLE_EXTRAS
from edgefuse.bundle.wheel import project_metadata

HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def dummy_wheel(folder: Path, name: str, version: str, *, requires: tuple[str, ...] = (),
                tag: str = "py3-none-any") -> Path:
    """A wheel of project ``name`` with no module; returns its path."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                + "".join(f"Requires-Dist: {item}\n" for item in requires))
    entries = [(f"{info}/METADATA", metadata.encode(), 0o644),
               (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: "
                                 f"true\nTag: {tag}\n".encode(), 0o644)]
    record = "".join(f"{entry},,\n" for entry, _, _ in entries) + f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), 0o644))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-{tag}.whl"
    write_zip(path, entries, DEFAULT_EPOCH)
    return path


def requirement_floors(extras: tuple[str, ...] = ("vision",)) -> dict[str, str]:
    """edgefuse's unconditional requirements and those of ``extras`` (the small spec's
    segmentation app needs ``vision``), name -> the lowest version each allows."""
    floors = {}
    for item in project_metadata()["requires"]:
        requirement, _, marker = item.partition(";")
        extra = re.fullmatch(r'\s*extra == "([^"]+)"\s*', marker)
        if marker and (extra is None or extra[1] not in extras):
            continue
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement.strip())
        if found:
            floors[found[1]] = found[2]
    return floors


def fill_wheelhouse(folder: Path) -> Path:
    """A stand-in wheel for each of edgefuse's requirements, those of every extra a bundle may
    carry included, in ``folder``; returns it."""
    for name, version in requirement_floors(BUNDLE_EXTRAS).items():
        dummy_wheel(folder, name, version)
    return folder
