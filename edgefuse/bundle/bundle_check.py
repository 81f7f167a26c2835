"""``edgefuse bundle verify``: the Python twin of install.sh's checks, plus the golden runs.

Why twice: install.sh must run on a board without edgefuse, and edgefuse must say in Python what
install.sh says in bash, so CI can check a bundle before it ships and a board after it arrives.
The checks are the same and run in the same order, refusing before anything is extracted:

- an archive: readable to its end (a truncated or non-gzip file is refused), at most
  ``MAX_MEMBERS`` members, each once, every member a file or folder inside one top folder with a
  plain name: no absolute path, no '..', no symlink or hard link at all (a bundle never has one,
  and a chain of links is how tarfile's own filter was bypassed, CVE-2025-4517), no device, fifo
  or other special file; the sizes it lists within ``RATIO``/``SLACK``/``CEILING``. Then, before
  anything else is extracted, its MANIFEST.json (and MANIFEST.sig) alone, checked as below, must
  name the bundle of the top folder, and every member must be a file it lists or a folder of one;
  extraction then also goes through tarfile's ``data`` filter where Python has it;
- MANIFEST.json: its own digest, with trusted keys (``keys``) its Ed25519 signature
  (``signing``) by one of them, and a bundle id that is its name and version (``name-version``);
- a folder: MANIFEST.json as above, it lists exactly the files present, no links, and every file
  matches. The one exception is an installed release, a folder
  ``PREFIX/releases/<id>-<first 12 of manifest_sha256>`` where PREFIX is the bundle's own
  install prefix: what install.sh built in it (``.venv``, the Python environment, and ``.opp``,
  the custom-op package) must match the digest record it wrote then
  (``PREFIX/venv-digests/<release>.sha256``, ``PREFIX/opp-digests/<release>.sha256``), file for
  file. Anywhere else such a folder is refused, as install.sh refuses it;
- without trusted keys the signature is NOT checked, and the report says so: a signed bundle is then
  refused (``signature-not-checked``) unless the caller opts out (``check_signature=False``,
  ``--no-signature-check``), because an attacker's re-signed bundle is as well-formed as the
  publisher's and an "OK" without the key vouches for nobody;
- ``requirements.lock`` pins exactly the wheels in ``wheels/`` by their sha256 (``target_wheels``),
  what install.sh's ``pip --require-hashes`` would otherwise refuse only on the board.

install.sh orders releases too (PEP 440 versions, build numbers); that needs the installed one,
so it has no twin here.

Then each model runs once on the best backend here against its golden recording.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgefuse.bundle.archive import MANIFEST, SIGNATURE, manifest_self_digest
from edgefuse.bundle.golden import GoldenCheck, check_golden
from edgefuse.bundle.signing import check_signature
from edgefuse.bundle.target_wheels import LOCK_FILE, lock_problems
from edgefuse.errors import InputError, Ref
from edgefuse.manifest import file_sha256

NAME = re.compile(r"[A-Za-z0-9._/+@-]+")  # whole names only: fullmatch, no trailing newline
# What install.sh builds inside an installed release, and the folder of PREFIX that holds the
# digest record of each (PREFIX/<records>/<release>.sha256)
BUILT = {".venv": "venv-digests", ".opp": "opp-digests"}
# An archive may unpack to at most RATIO times its size plus SLACK bytes, and never more than
# CEILING: a bundle's models and wheel compress little, while a bomb of zeros (or a sparse
# member) would fill TMPDIR before any other check could refuse it.
RATIO, SLACK, CEILING = 100, 64 << 20, 8 << 30
# Members of an archive (a bundle holds a few hundred files and folders) and bytes of its
# MANIFEST.json or MANIFEST.sig, the two read before anything else: install.sh's limits too.
MAX_MEMBERS, MAX_MANIFEST = 10_000, 8 << 20


def _unsafe(message: str) -> InputError:
    return InputError(f"unsafe archive: {message}", hint="nothing was extracted or installed; "
                      "rebuild the bundle with `edgefuse build`", reference=Ref.UNSAFE_ARCHIVE)


def check_archive(path: Path, keys: Sequence[Path] = ()) -> str:
    """Check every member of the archive at ``path``, then its MANIFEST.json (signed by one of
    ``keys``, when given), extracting nothing; returns its top folder (the bundle id)."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            members = []
            for member in archive:  # reads to the end: a truncated file fails here
                members.append(member)
                if len(members) > MAX_MEMBERS:
                    raise _unsafe(f"it holds more than {MAX_MEMBERS} members (a bundle holds a "
                                  "few hundred files and folders)")
            top = _check_members(path, members)
            manifest, signature = (_small_member(archive, members, f"{top}/{name}")
                                   for name in (MANIFEST, SIGNATURE))
    except PermissionError as exc:
        raise _cannot_read(path, exc) from exc
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise InputError(f"'{path}' is truncated or not a .tar.gz ({exc})",
                         hint="copy the archive again; nothing was installed",
                         reference=Ref.TRUNCATED_ARCHIVE) from exc
    if manifest is None:
        raise InputError(f"'{path}' holds no {top}/{MANIFEST}: not an edgefuse bundle",
                         reference=Ref.BAD_BUNDLE)
    data = _check_manifest(manifest, signature, keys, path, f"{path}: {top}/{MANIFEST}")
    if data["bundle"]["id"] != top:
        raise _unsafe(f"'{path}' holds the folder '{top}/', but its {MANIFEST} is the bundle "
                      f"'{data['bundle']['id']}': renamed or mixed up")
    allowed = {top: "d", f"{top}/{MANIFEST}": "f", f"{top}/{SIGNATURE}": "f"}
    for name in data["files"]:
        allowed[f"{top}/{name}"] = "f"
        parts = name.split("/")
        allowed.update({"/".join([top, *parts[:depth]]): "d" for depth in range(1, len(parts))})
    for member in members:
        if allowed.get(member.name) != ("d" if member.isdir() else "f"):
            raise _unsafe(f"'{member.name}' is not in {MANIFEST}'s list (planted?)")
    return top


def _check_members(path: Path, members: list[tarfile.TarInfo]) -> str:
    if not members:
        raise InputError(f"'{path}' is an empty archive", reference=Ref.TRUNCATED_ARCHIVE)
    top = members[0].name.split("/")[0]
    seen = set()
    for member in members:
        name = member.name
        if name.startswith("/"):
            raise _unsafe(f"member '{name}' has an absolute path")
        if ".." in name.split("/"):
            raise _unsafe(f"member '{name}' climbs out with '..'")
        if not NAME.fullmatch(name):
            raise _unsafe(f"member '{name}' has characters a bundle never uses")
        if name.split("/")[0] != top:
            raise _unsafe(f"member '{name}' is outside the bundle's folder '{top}/'")
        if member.issym() or member.islnk():
            kind = "symlink" if member.issym() else "hard link"
            raise _unsafe(f"'{name}' is a {kind}; a bundle holds only files and folders")
        elif not (member.isfile() or member.isdir()):
            raise _unsafe(f"'{name}' is a device, fifo or other special file")
        if member.issparse():
            raise _unsafe(f"'{name}' is a sparse file; a bundle never holds one")
        if name in seen:
            raise _unsafe(f"'{name}' is in it twice; a bundle holds each file once")
        seen.add(name)
    total = sum(member.size for member in members)
    limit = min(CEILING, RATIO * path.stat().st_size + SLACK)
    if total > limit:
        raise _unsafe(f"it would unpack to {total} bytes, more than {limit} for a "
                      f"{path.stat().st_size}-byte archive (a decompression bomb?)")
    return top


def _small_member(archive: tarfile.TarFile, members: list[tarfile.TarInfo],
                  name: str) -> bytes | None:
    """The bytes of the file member ``name`` (None where there is none), at most MAX_MANIFEST."""
    member = next((m for m in members if m.name == name and m.isfile()), None)
    if member is None:
        return None
    if member.size > MAX_MANIFEST:
        raise _unsafe(f"'{name}' has {member.size} bytes, more than the {MAX_MANIFEST} a "
                      "bundle's ever needs")
    handle = archive.extractfile(member)
    return handle.read() if handle is not None else None


def _cannot_read(path: Path, exc: OSError) -> InputError:
    return InputError(f"cannot read '{path}': {exc.strerror or exc}",
                      hint="check the file's permissions (ls -l); run as a user who may read "
                           "the whole bundle", reference=Ref.CANNOT_READ)


def _digest(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError as exc:
        raise _cannot_read(path, exc) from exc


def extract(path: Path, into: Path, keys: Sequence[Path] = ()) -> Path:
    """Check (``check_archive``), then extract the archive into ``into``; returns the bundle
    folder."""
    top = check_archive(path, keys)
    with tarfile.open(path, "r:gz") as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(into, filter="data")
        else:  # Python before 3.11.4: the member checks above are the filter
            archive.extractall(into)  # every member was checked above
    return into / top


def _check_manifest(manifest: bytes, signature: bytes | None, keys: Sequence[Path],
                    where: Path, manifest_path: Path | str) -> dict[str, Any]:
    """MANIFEST.json's own digest, its signature (with ``keys``) and the bundle id it names;
    returns its data. ``where``: the bundle's folder or archive, ``manifest_path`` its
    MANIFEST.json, for the messages."""
    try:
        text = manifest.decode("utf-8")
        claimed, actual = manifest_self_digest(text)
        data = json.loads(text)
    except ValueError as exc:  # UnicodeDecodeError included: a binary file is not JSON either
        raise InputError(f"{manifest_path} was modified or damaged: it is not JSON ({exc})",
                         hint="copy the bundle again", reference=Ref.BUNDLE_FILE_MODIFIED) from exc
    if not isinstance(data, dict):
        raise InputError(f"{manifest_path} holds a JSON {type(data).__name__}, not an object",
                         hint="copy the bundle again", reference=Ref.BAD_BUNDLE)
    if claimed is None:
        raise InputError(f"{manifest_path} carries no manifest_sha256: damaged or not a bundle",
                         reference=Ref.BAD_BUNDLE)
    if claimed != actual:
        raise InputError(f"{manifest_path} was modified (its digest does not match)",
                         hint="copy the bundle again", reference=Ref.BUNDLE_FILE_MODIFIED)
    if keys:
        check_signature(manifest, signature, keys, where)
    bundle = data.get("bundle")
    if (not isinstance(bundle, dict) or not isinstance(data.get("files"), dict)
            or bundle.get("id") != f"{bundle.get('name')}-{bundle.get('version')}"):
        raise InputError(f"{manifest_path} names no bundle, or an id that is not its name and "
                         "version", hint="rebuild the bundle", reference=Ref.BAD_BUNDLE)
    return data


def verify_tree(folder: Path, keys: Sequence[Path] = ()) -> dict[str, Any]:
    """Check a bundle folder against its MANIFEST.json (and its signature by one of ``keys``,
    when given); returns the manifest."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise InputError(f"'{folder}' has no {MANIFEST}: not an edgefuse bundle",
                         reference=Ref.BAD_BUNDLE)
    signature = folder / SIGNATURE
    try:
        manifest = manifest_path.read_bytes()
        signed = signature.read_bytes() if signature.is_file() else None
    except OSError as exc:
        raise _cannot_read(manifest_path, exc) from exc
    data = _check_manifest(manifest, signed, keys, folder, manifest_path)
    built = [name for name in BUILT if (folder / name).is_symlink() or (folder / name).exists()]
    for name in built:
        _check_built(folder, name, data)
    listed = data["files"]
    present = set()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0] in built:
            continue  # checked against install.sh's record above
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise InputError(f"'{path}' is a link or special file; a bundle holds only files and "
                             "folders", reference=Ref.BUNDLE_FILE_MODIFIED)
        if path.is_file() and relative.as_posix() not in (MANIFEST, SIGNATURE):
            present.add(relative.as_posix())
    missing, unlisted = sorted(set(listed) - present), sorted(present - set(listed))
    if missing or unlisted:
        raise InputError(
            f"the files of '{folder}' differ from {MANIFEST}'s list",
            context="\n".join([f"missing:  {n}" for n in missing[:5]]
                              + [f"unlisted: {n}" for n in unlisted[:5]]),
            hint="copy the whole bundle again; nothing was installed",
            reference=Ref.BUNDLE_FILE_MODIFIED)
    changed = [name for name, digest in sorted(listed.items())
               if _digest(folder / name) != digest]
    if changed:
        raise InputError(f"{len(changed)} file(s) of '{folder}' do not match {MANIFEST}",
                         context="\n".join(changed[:10]),
                         hint="tampered or damaged: copy the bundle again; nothing was installed",
                         reference=Ref.BUNDLE_FILE_MODIFIED)
    if (folder / LOCK_FILE).is_file():  # what install.sh's pip --require-hashes will refuse
        problems = lock_problems(folder)
        if problems:
            raise InputError(f"{LOCK_FILE} of '{folder}' does not pin the wheels it carries",
                             context="\n".join(problems[:10]),
                             hint="rebuild the bundle; nothing was installed",
                             reference=Ref.BUNDLE_FILE_MODIFIED)
    return data


def built_listing(release: Path, name: str = ".venv") -> str:
    """install.sh's ``built_listing``: each file's ``sha256  NAME/path``, then each link's
    ``link  NAME/path -> target``, both sorted by path."""
    files, links = [], []
    for directory, folders, names in os.walk(release / name):  # links are not followed
        for entry in folders + names:
            path = Path(directory, entry)
            relative = path.relative_to(release).as_posix()
            if path.is_symlink():
                links.append(f"link  {relative} -> {os.readlink(path)}")
            elif path.is_file():
                files.append((relative, f"{file_sha256(path)}  {relative}"))
    return "\n".join([line for _, line in sorted(files)] + sorted(links))


def _check_built(release: Path, name: str, manifest: dict[str, Any]) -> None:
    """What install.sh built in ``release`` (``name``: .venv or .opp): only in the folder it
    built it in, PREFIX/releases/<id>-<digest>, exactly as it recorded it then."""
    resolved = release.resolve()
    install = manifest.get("install")
    prefix = install.get("prefix") if isinstance(install, dict) else None
    home = (Path(prefix) / "releases" / f"{manifest['bundle']['id']}-"
            f"{str(manifest.get('manifest_sha256'))[:12]}") if isinstance(prefix, str) else None
    record = resolved.parent.parent / BUILT[name] / f"{resolved.name}.sha256"
    built = release / name
    what = "the Python environment" if name == ".venv" else "the custom-op package"
    if (home is None or not home.is_dir() or home.resolve() != resolved or built.is_symlink()
            or not record.is_file()
            or record.read_text(encoding="utf-8").rstrip("\n") != built_listing(release, name)):
        raise InputError(f"'{built}' is not {what} install.sh built (changed, planted, a link, "
                         f"or outside {prefix}/releases)", hint="a bundle never holds "
                         f"{name}; on a board, reinstall the release",
                         reference=Ref.BUNDLE_FILE_MODIFIED)


@dataclasses.dataclass
class BundleReport:
    bundle_id: str
    files: int
    models: dict[str, GoldenCheck]
    signature: str = "NOT checked"  # what was established about MANIFEST.sig

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.models.values())

    def to_json(self) -> dict[str, Any]:
        return {"bundle": self.bundle_id, "files": self.files, "passed": self.passed,
                "signature": self.signature,
                "models": {name: check.to_json() for name, check in self.models.items()}}

    def render(self) -> str:
        lines = [f"{self.bundle_id}: {self.files} files match MANIFEST.json",
                 f"  signature: {self.signature}"]
        for name, check in self.models.items():
            worst = min(o.cosine for o in check.outputs) if check.outputs else float("nan")
            lines.append(f"  {name}: {check.backend} against the golden from "
                         f"{check.recorded_on}: min cosine {worst:.6f} "
                         f"(gate {check.min_cosine}) {'ok' if check.passed else 'FAIL'}")
        return "\n".join(lines)


def verify_bundle(target: str | Path, *, backends: Sequence[str] = ("acl", "cuda", "cpu"),
                  run_models: bool = True, keys: Sequence[Path] = (),
                  check_signature: bool = True) -> BundleReport:
    """Check a bundle folder or archive (signed by one of ``keys``, when given), then run each
    model against its golden recording.

    Without ``keys`` a signed bundle is refused unless ``check_signature`` is False: its
    signature could be anyone's. An unsigned one passes, its report saying the signature was
    NOT checked."""
    path = Path(target)
    if not path.exists():
        raise InputError(f"'{path}' does not exist", hint="give a bundle folder or its .tar.gz",
                         reference=Ref.FILE_NOT_FOUND)
    scratch = None
    try:
        if path.is_file():
            scratch = Path(tempfile.mkdtemp(prefix="edgefuse-bundle-"))
            path = extract(path, scratch, keys)
        manifest = verify_tree(path, keys)
        signature = _signature_state(path, keys, check_signature)
        models = {}
        if run_models:
            for name, model in sorted(manifest.get("models", {}).items()):
                host = path / model["host_onnx"] if model.get("host_onnx") else None
                # an INT8 build differs from its FP16 golden (sim) by INT8's error: its own gate
                gates = model["gates"]
                models[name] = check_golden(path / model["folder"], path / model["golden"],
                                            backends, gates.get("int8_min_cosine",
                                                                gates["fp16_min_cosine"]), host)
        return BundleReport(manifest["bundle"]["id"], len(manifest["files"]), models, signature)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _signature_state(folder: Path, keys: Sequence[Path], check: bool) -> str:
    """The report's word on the signature, after ``verify_tree`` checked it against ``keys``."""
    signed = (folder / SIGNATURE).is_file()
    if keys:
        return "ok: signed by a trusted key (" + ", ".join(str(key) for key in keys) + ")"
    if not signed:
        return "NOT checked: the bundle is unsigned (no MANIFEST.sig)"
    if check:
        raise InputError(f"'{folder.name}' is signed, but no key was given: signature NOT checked",
                         context="a bundle re-signed by anyone verifies without a key as well as "
                                 "the publisher's does",
                         hint="give the publisher's public key (--key release.pub.pem), or pass "
                              "--no-signature-check to check the files only",
                         reference=Ref.SIGNATURE_NOT_CHECKED)
    return "NOT checked (--no-signature-check): signed, by a key nobody checked"
