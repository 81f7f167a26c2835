"""The bundle: its layout, ``MANIFEST.json`` and the deterministic ``.tar.gz`` of it all.

Layout (``<name>-<version>/``)::

    MANIFEST.json              format, its own digest, bundle (name, version, id, build number),
                               target, tools, models (parity, ATC argv), app, service, install
                               prefix, files (sha256 of every other file)
    MANIFEST.sig               with ``build --sign``: the Ed25519 signature of MANIFEST.json
    install.sh                 verify + install on the board (bash, no edgefuse needed)
    minirc_install_hook.sh     the Atlas 200I DK A2 card maker's hook
    spec.json                  the validated spec
    models/<name>/             the BUILD_DIR (model.onnx, compile.sh, model.om where ATC ran,
                               manifest.json with "app", ...), metadata.json for the app,
                               golden.npz (a recording), reports/{optimize,fp16}.json
    opp/                       the custom-op package project (when a model needs it)
    app/                       config.yaml, apps/ (the wrappers)
    wheels/                    edgefuse-<v>-py3-none-any.whl and every wheel it needs on the board
                               (its Python and platform: ``target_wheels``)
    requirements.lock          name==version --hash=sha256:... of each wheel: all the board's pip
                               installs, from wheels/ only
    systemd/<service>.service, env/<service>.env

Why MANIFEST.json digests itself: ``install.sh`` reads the file list with ``sed`` and checks it
with ``sha256sum``, so the list must be in a form a shell can read (one ``"path": "sha256"`` per
line, which ``json.dumps(indent=2)`` gives) and a change to MANIFEST.json itself (a file dropped
from the list) must be caught too: ``manifest_sha256`` is the digest of the file with that
value written as 64 zeros.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from edgefuse._files import write_text
from edgefuse.bundle.digests import tree_files
from edgefuse.manifest import file_sha256

BUNDLE_FORMAT = "edgefuse-bundle/1"
MANIFEST = "MANIFEST.json"
SIGNATURE = "MANIFEST.sig"  # the Ed25519 signature of MANIFEST.json (``signing``), when signed
ZEROS = "0" * 64
SELF_KEY = "manifest_sha256"


def copy_file(source: Path, bundle: Path, relative: str) -> None:
    target = bundle / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    target.chmod(0o755 if source.stat().st_mode & 0o100 else 0o644)


def write_file(bundle: Path, relative: str, text: str, *, executable: bool = False) -> None:
    target = bundle / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    target.chmod(0o755 if executable else 0o644)


def write_bundle_manifest(bundle: Path, record: dict[str, Any]) -> str:
    """Write MANIFEST.json (``record`` + the digests of every file); returns its digest."""
    files = {path.relative_to(bundle).as_posix(): file_sha256(path)
             for path in tree_files(bundle)
             if path.relative_to(bundle).as_posix() not in (MANIFEST, SIGNATURE)}
    data = {"format": BUNDLE_FORMAT, SELF_KEY: ZEROS, **record, "files": dict(sorted(
        files.items()))}
    text = json.dumps(data, indent=2) + "\n"
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    write_text(bundle / MANIFEST, text.replace(f'"{SELF_KEY}": "{ZEROS}"',
                                               f'"{SELF_KEY}": "{digest}"', 1))
    return digest


def manifest_self_digest(text: str) -> tuple[str | None, str]:
    """(the digest MANIFEST.json claims, the digest it has)."""
    data = json.loads(text)
    claimed = data.get(SELF_KEY) if isinstance(data, dict) else None
    if not isinstance(claimed, str):
        return None, ""
    blanked = text.replace(f'"{SELF_KEY}": "{claimed}"', f'"{SELF_KEY}": "{ZEROS}"', 1)
    return claimed, hashlib.sha256(blanked.encode("utf-8")).hexdigest()
