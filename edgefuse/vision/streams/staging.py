"""Output files written under a temporary name and renamed into place, and what a crash leaves.

Why a lock on every temporary file: a process killed by ``kill -9``, an OOM kill or a power cut
leaves its ``.name.XXXXXXXX.suffix`` temporaries behind, and the next start must tell them from
the temporaries of a run still writing the same folder. A staged file holds an exclusive
``flock`` for as long as it exists; the kernel drops it when the process dies, so a temporary
whose lock can be taken is a leftover. Leftovers are recovered where that is worth something (the
whole lines of a JSON Lines file, renamed ``<stem>.recovered-<time><suffix>``) and removed
otherwise (a video cut before its index is unplayable; an image is rewritten next time), each
with a warning. Without ``fcntl`` (Windows) nothing can tell them apart and nothing is removed.

Files renamed into place get the modes a plain ``open`` would give (0666 less the umask), not
``mkstemp``'s 0600.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import tempfile
import time
from pathlib import Path

from edgefuse._files import (
    FILE_MODE,
    WriteFailedError,
    cannot_write,
    check_output_path,
    fsync_file,
    umask,
)

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; leftovers are left alone
    fcntl = None

log = logging.getLogger(__name__)

_RANDOM = r"[a-z0-9_]{8}"  # tempfile.mkstemp's random part


class Staged:
    """A file written under a temporary name next to ``path`` and renamed on ``commit``."""

    def __init__(self, path: str | os.PathLike[str], suffix: str) -> None:
        self.path = Path(path)
        parent = check_output_path(self.path)
        try:
            fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=suffix, dir=parent)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):  # the user's to fix
                raise cannot_write(parent, exc) from exc
            raise WriteFailedError(self.path, exc) from exc  # a full disk, an I/O error
        self.tmp = Path(name)
        self._lock_fd: int | None = fd
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def commit(self, *, size: int | None = None) -> None:
        """Flush the temporary file to the disk and rename it into place; ``size``: the bytes
        the writer wrote, checked against the file's. A failure (no space at write-back, a rename
        refused, a size that differs) removes the temporary and raises ``WriteFailedError``:
        nothing that looks finished is left."""
        try:
            found = fsync_file(self.tmp)
            if size is not None and found != size:
                raise WriteFailedError(self.path, what=f"{found} bytes reached the disk of the "
                                                       f"{size} written")
            os.chmod(self.tmp, FILE_MODE & ~umask())
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise WriteFailedError(self.path, exc) from exc
        except WriteFailedError:
            self.discard()
            raise
        self._unlock()

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def leftovers(folder: Path, target: str, suffix: str) -> list[Path]:
    """Temporaries of ``Staged(folder / name, suffix)`` that no live process holds, for every
    name matching the regular expression ``target``."""
    if fcntl is None or not folder.is_dir():
        return []
    pattern = re.compile(rf"\.(?:{target})\.{_RANDOM}{re.escape(suffix)}")
    found = []
    for path in sorted(folder.iterdir()):
        if not pattern.fullmatch(path.name) or not path.is_file():
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # committed or discarded meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a running process writes it
            continue
        finally:
            os.close(fd)
        found.append(path)
    return found


def remove_leftovers(folder: Path, target: str, suffix: str, what: str) -> None:
    """Delete the leftover temporaries of ``target`` (see ``leftovers``), each with a warning."""
    for path in leftovers(folder, target, suffix):
        log.warning("removing %s, a temporary %s an earlier run left unfinished", path, what)
        path.unlink(missing_ok=True)


def recover_jsonl_leftovers(path: Path) -> list[Path]:
    """Keep the whole lines of the leftover temporaries of the JSON Lines file ``path`` as
    ``<stem>.recovered-<time><suffix>`` (their last change, UTC); returns what was written."""
    recovered = []
    for leftover in leftovers(path.parent, re.escape(path.name), ".tmp"):
        keep_whole_lines(leftover)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(leftover.stat().st_mtime))
        target = free_name(path.with_name(f"{path.stem}.recovered-{stamp}{path.suffix}"))
        os.chmod(leftover, FILE_MODE & ~umask())
        os.replace(leftover, target)
        log.warning("recovered %s from the temporary %s an earlier run left unfinished",
                    target, leftover.name)
        recovered.append(target)
    return recovered


def keep_whole_lines(path: Path) -> int:
    """Cut a last line that has no newline (a write cut by a crash); returns the bytes cut."""
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        position, chunk = size, 65536
        while position > 0:
            start = max(0, position - chunk)
            handle.seek(start)
            block = handle.read(position - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            position = start
        else:
            end = 0
        handle.truncate(end)
        return size - end


def free_name(path: Path) -> Path:
    """``path``, or ``<stem>-1<suffix>``, ``-2``, ... the first that does not exist."""
    candidate, number = path, 0
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate
