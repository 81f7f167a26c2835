"""A real full file system for the tests: a small tmpfs mounted in the test's folder, filled.

Why not a mock: what fails on a full disk (a short ``write``, ENOSPC from FFmpeg's muxer,
OpenCV's writer returning False, ``fsync``) is the kernel's and the libraries' behaviour; only a
real file system shows it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(folder: Path, size: str) -> None:
    """A tmpfs of ``size`` at ``folder``; skips (saying why) where this process cannot mount."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                           str(folder)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"a full file system needs a mount (root or CAP_SYS_ADMIN): "
                    f"{done.stderr.strip() or done.returncode}")


def fill(folder: Path, leave: int = 0) -> Path:
    """Writes ``folder/filler`` until the file system has at most ``leave`` bytes free."""
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
                if free <= leave:
                    break
                handle.write(b"\0" * min(free - leave, 1 << 16))
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], check=False)


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` while the block runs (skips as ``mount_tmpfs``)."""
    mount_tmpfs(folder, size)
    try:
        yield folder
    finally:
        unmount(folder)


def tmpfs_fixture(name: str, size: str):
    """A fixture ``name``: a tmpfs of ``size`` in the test's folder, e.g. in a test module
    ``full = tmpfs_fixture("full", "1m")``."""

    @pytest.fixture(name=name)
    def mounted(tmp_path: Path) -> Iterator[Path]:
        with tmpfs(tmp_path / name, size) as folder:
            yield folder

    return mounted
