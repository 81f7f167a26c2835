"""Archives whose bytes depend only on their contents: tar.gz, zip (wheels) and .npz.

Why by hand: ``tarfile.add`` records the file system's mtimes, owners and permission bits,
``gzip`` the time and file name, ``zipfile`` the current time (``numpy.savez`` goes through it),
so two builds of the same inputs differ. Here every entry is sorted by name, stamped with one
fixed time (``SOURCE_DATE_EPOCH``), owned by 0:0 without names, and given 0755 (folders,
executables) or 0644; gzip's header carries the same time and no name. The compressor is zlib at
a fixed level: the bytes are equal wherever the zlib library is the same.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from edgefuse._files import atomic_output
from edgefuse.bundle.digests import tree_files

DEFAULT_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the earliest time a zip entry can carry
COMPRESSION_LEVEL = 9


def file_mode(path: Path) -> int:
    """0755 for an executable file, 0644 for any other."""
    return 0o755 if os.access(path, os.X_OK) else 0o644


def _zip_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    return time.gmtime(max(epoch, DEFAULT_EPOCH))[:6]


def write_zip(path: str | os.PathLike[str], entries: Iterable[tuple[str, bytes, int]],
              epoch: int) -> None:
    """A zip of (name, data, mode) entries, sorted by name, deflated, with one fixed time."""
    with atomic_output(path, suffix=".zip") as tmp, zipfile.ZipFile(tmp, "w") as archive:
        for name, data, mode in sorted(entries, key=lambda entry: entry[0]):
            info = zipfile.ZipInfo(name, date_time=_zip_time(epoch))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | mode) << 16
            info.create_system = 3  # Unix, so that the mode bits are read
            archive.writestr(info, data, compresslevel=COMPRESSION_LEVEL)


def save_npz(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], epoch: int) -> None:
    """``numpy.savez`` with a fixed entry time (``numpy.load`` reads it as usual)."""
    entries = []
    for name, array in arrays.items():
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
        entries.append((f"{name}.npy", buffer.getvalue(), 0o644))
    write_zip(path, entries, epoch)


def write_tar_gz(path: str | os.PathLike[str], folder: Path, top: str, epoch: int) -> None:
    """``folder``'s tree as ``top/...`` in a gzip'd tar (see the module docstring)."""
    members: list[tuple[str, Path | None]] = [(top, None)]
    directories = {top}
    for file in tree_files(folder):
        relative = file.relative_to(folder)
        for depth in range(1, len(relative.parts)):
            name = "/".join((top, *relative.parts[:depth]))
            if name not in directories:
                directories.add(name)
                members.append((name, None))
        members.append(("/".join((top, *relative.parts)), file))
    members.sort(key=lambda member: member[0])
    with atomic_output(path, suffix=".tar.gz") as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=epoch,
                          compresslevel=COMPRESSION_LEVEL) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, file in members:
            info = tarfile.TarInfo(name)
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if file is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                archive.addfile(info)
                continue
            info.size = file.stat().st_size
            info.mode = file_mode(file)
            with open(file, "rb") as handle:
                archive.addfile(info, handle)
