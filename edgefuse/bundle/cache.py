"""A content-addressed cache of stage results: one folder per (stage, key), written atomically.

Why this shape: a key is the sha256 of everything that determines a stage's output (its input
files' digests, its options, the tool versions: ``digests``), so an unchanged rebuild finds every
result and a changed option misses exactly the stages downstream of it. Each entry is a folder
``ROOT/<stage>/<key[:2]>/<key>/`` holding the stage's files and ``entry.json`` (the files'
digests and what the stage reported). It is produced in a temporary sibling and renamed into
place only when complete, so a crash, a Ctrl-C or a failing gate leaves no entry at all, never a
half-written one; an entry whose files no longer match ``entry.json`` (a disk error, a hand edit)
is treated as absent and replaced. Several processes may share a cache (``--shard``): when two
produce the same entry, the first rename wins and the other copy is dropped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgefuse._files import cannot_write, publish_directory
from edgefuse.bundle.digests import tree_files
from edgefuse.manifest import file_sha256

ENTRY_FILE = "entry.json"
ENTRY_FORMAT = "edgefuse-cache-entry/1"
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Entry:
    """A stored stage result: its folder, its files' digests and what the stage reported."""

    stage: str
    key: str
    directory: Path
    files: dict[str, str]  # relative path -> sha256
    info: dict[str, Any]

    def path(self, name: str) -> Path:
        return self.directory / name


class Cache:
    """Stage results under ``root``; ``read=False`` (``--no-cache``) rebuilds and refreshes."""

    def __init__(self, root: str | os.PathLike[str], *, read: bool = True) -> None:
        self.root = Path(root)
        self.read = read
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise cannot_write(self.root, exc) from exc

    def _folder(self, stage: str, key: str) -> Path:
        return self.root / stage / key[:2] / key

    def get(self, stage: str, key: str) -> Entry | None:
        """The entry for (stage, key) when it exists and its files match their digests."""
        if not self.read:
            return None
        folder = self._folder(stage, key)
        data = _intact_record(folder)
        if data is None:
            if (folder / ENTRY_FILE).exists():
                log.warning("cache entry %s/%s is damaged; rebuilding it", stage, key[:12])
            return None
        return Entry(stage, key, folder, dict(data["files"]), data.get("info", {}))

    def put(self, stage: str, key: str, produce: Callable[[Path], dict[str, Any]]) -> Entry:
        """Run ``produce(folder)`` in a scratch folder and store what it wrote as the entry."""
        parent = self.root / stage / key[:2]
        parent.mkdir(parents=True, exist_ok=True)
        try:
            scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:12]}-", dir=parent))
        except OSError as exc:
            raise cannot_write(parent, exc) from exc
        try:
            publish_directory(scratch)
            info = produce(scratch)
            files = {p.relative_to(scratch).as_posix(): file_sha256(p)
                     for p in tree_files(scratch)}
            record = {"format": ENTRY_FORMAT, "stage": stage, "key": key, "files": files,
                      "info": info}
            text = json.dumps(record, indent=1, sort_keys=True)
            (scratch / ENTRY_FILE).write_text(text, encoding="utf-8")
            info = json.loads(text)["info"]  # as a later read gives it: equal builds, equal bytes
            final = self._folder(stage, key)
            self._install(scratch, final)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return Entry(stage, key, final, files, info)

    def _install(self, scratch: Path, final: Path) -> None:
        """Rename ``scratch`` to ``final``; an existing entry is replaced only when damaged or
        when refreshing (``read=False``), otherwise the other writer's copy is kept."""
        if final.exists():
            if self.read and _intact_record(final) is not None:
                shutil.rmtree(scratch, ignore_errors=True)
                return
            retired = Path(tempfile.mkdtemp(prefix=".old-", dir=final.parent))
            os.replace(final, retired / "entry")
            shutil.rmtree(retired, ignore_errors=True)
        try:
            os.replace(scratch, final)
        except OSError:
            if not final.is_dir():  # not a concurrent writer: a real failure
                raise
            shutil.rmtree(scratch, ignore_errors=True)

    def cached_only(self) -> CachedOnly:
        """This cache, read only: a stage that would have to be built raises ``NotCached``."""
        return CachedOnly(self)

    def fetch(self, stage: str, key: str,
              produce: Callable[[Path], dict[str, Any]]) -> tuple[Entry, bool]:
        """(entry, True) from the cache, else (the entry ``produce`` made, False)."""
        found = self.get(stage, key)
        if found is not None:
            return found, True
        return self.put(stage, key, produce), False


class NotCached(Exception):
    """A stage's result is not in the cache (raised by ``CachedOnly.fetch``)."""


class CachedOnly:
    """A cache view that only reads. Why: a fully cached model is assembled in a fraction of a
    second, while a worker process to build it costs a Python start and edgefuse's imports."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache

    def fetch(self, stage: str, key: str,
              produce: Callable[[Path], dict[str, Any]]) -> tuple[Entry, bool]:
        found = self._cache.get(stage, key)
        if found is None:
            raise NotCached(stage)
        return found, True


def _intact_record(folder: Path) -> dict[str, Any] | None:
    """The entry's record when every file it lists matches its digest, else None."""
    record = folder / ENTRY_FILE
    if not record.is_file():
        return None
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        intact = data.get("format") == ENTRY_FORMAT and all(
            (folder / name).is_file() and file_sha256(folder / name) == digest
            for name, digest in data["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return data if intact else None
