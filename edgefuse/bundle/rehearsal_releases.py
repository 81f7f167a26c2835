"""The releases a rehearsal installs: the spec as it is, a newer one, and a newer broken one.

Why rebuilt from the spec rather than taken from a build folder: an upgrade needs a newer signed
release of the same bundle, and the only honest way to get one is the build a publisher runs:
the same spec with the version bumped and a higher build number, signed with the same key.

Why the broken release is made by damaging a built one: ``edgefuse build`` refuses a bundle whose
app does not start, so no spec yields a release that fails on the board; a release that passes
every check of the installer (files, digests, the publisher's signature) and still cannot run is
what the health check and its rollback exist for. Its app's model is cut in half, then
MANIFEST.json is rewritten and signed again with the publisher's key, as a publisher's broken
pipeline would have shipped it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization

from edgefuse.bundle.archive import MANIFEST, SELF_KEY, SIGNATURE, write_bundle_manifest
from edgefuse.bundle.builder import BuildOutcome, build, source_date_epoch
from edgefuse.bundle.signing import load_private_key, new_key_pair, sign_bundle
from edgefuse.bundle.spec import BuildSpec
from edgefuse.errors import InputError, Ref


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    build_number: int
    bundle: Path  # the bundle folder
    archive: Path | None  # None: installed from its folder (the broken release)
    installer: Path
    seconds: float


def bumped(version: str) -> str:
    """The next version: the last number + 1 (``0.1.0`` -> ``0.1.1``), else ``.1`` appended."""
    found = re.search(r"(\d+)(\D*)$", version)
    if found is None:
        return f"{version}.1"
    return f"{version[:found.start(1)]}{int(found.group(1)) + 1}{found.group(2)}"


def publisher_key(sign_key: Path | None, out_dir: Path) -> tuple[Path, Path]:
    """(private, public) PEM: ``sign_key`` and its public half, or a new pair in OUT_DIR/keys."""
    (out_dir / "keys").mkdir(parents=True, exist_ok=True)
    if sign_key is None:
        return new_key_pair(out_dir / "keys", "rehearsal")
    key = load_private_key(sign_key)
    public = out_dir / "keys" / f"{sign_key.name.removesuffix('.key.pem')}.pub.pem"
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return sign_key, public


def build_release(spec: BuildSpec, version: str, build_number: int, out: Path, key: Path,
                  cache_dir: Path | None) -> Release:
    """The spec at ``version``, built and signed into ``out``.

    Another version is written as a spec file beside the original (its relative paths must keep
    their meaning), built, and removed."""
    spec_path = spec.path
    written = None
    if version != spec.version:
        document = yaml.safe_load(spec.path.read_text(encoding="utf-8"))
        document["bundle"]["version"] = version
        written = spec.directory / f".{spec.path.stem}.rehearse-{version}.yaml"
        written.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        spec_path = written
    try:
        outcome: BuildOutcome = build(spec_path, out, cache_dir=cache_dir, progress=False,
                                      sign_key=key, build_number=build_number, force=True)
    finally:
        if written is not None:
            written.unlink(missing_ok=True)
    return Release(version, build_number, outcome.bundle_dir, outcome.archive,
                   outcome.output_dir / "install.sh", outcome.seconds)


def releases_of(spec: BuildSpec, out: Path, key: Path,
                cache_dir: Path | None) -> tuple[Release, Release, Release]:
    """The spec's release, a newer one and a newer broken one, built numbers apart."""
    base = source_date_epoch(spec)
    out.mkdir(parents=True, exist_ok=True)
    first = build_release(spec, spec.version, base, out / spec.version, key, cache_dir)
    newer = bumped(spec.version)
    second = build_release(spec, newer, base + 1, out / newer, key, cache_dir)
    newest = bumped(newer)
    third = build_release(spec, newest, base + 2, out / newest, key, cache_dir)
    return first, second, broken(spec, third, key)


def broken(spec: BuildSpec, release: Release, key: Path) -> Release:
    """``release`` with its app's model cut in half, re-listed and signed again."""
    model_dir = release.bundle / "models" / spec.app["model"]
    model = model_dir / "model.onnx"
    if not model.is_file():
        raise InputError(f"{model} is missing: cannot make the broken release",
                         reference=Ref.BAD_BUNDLE)
    data = model.read_bytes()
    model.write_bytes(data[:len(data) // 2])
    manifest = json.loads((release.bundle / MANIFEST).read_text(encoding="utf-8"))
    record = {name: value for name, value in manifest.items()
              if name not in ("format", SELF_KEY, "files")}
    (release.bundle / SIGNATURE).unlink(missing_ok=True)
    write_bundle_manifest(release.bundle, record)
    sign_bundle(release.bundle, key)
    if release.archive is not None:  # the archive still holds the whole model: not this release
        release.archive.unlink()
        Path(f"{release.archive}.sha256").unlink(missing_ok=True)
    return dataclasses.replace(release, archive=None)


def copy_release(release: Release, into: Path) -> str:
    """Put the release's archive (or folder) into ``into``; its name there."""
    if release.archive is not None:
        shutil.copyfile(release.archive, into / release.archive.name)
        return release.archive.name
    shutil.copytree(release.bundle, into / release.bundle.name)
    return release.bundle.name
