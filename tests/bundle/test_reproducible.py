"""The archive and the digests a cache key is made of, on hand-made folders: a tar's modes do
not depend on the source files' modes or the umask, and a folder's digest names its files."""

from __future__ import annotations

import os
import tarfile

import pytest

from edgefuse.bundle.digests import tree_sha256
from edgefuse.bundle.reproducible import write_tar_gz
from edgefuse.manifest import file_sha256

pytestmark = pytest.mark.unit

FILES = {"run.sh": b"#!/bin/sh\n", "a/data.bin": b"\x00\x01", "a/b/notes.txt": b"hello\n",
         "private.key": b"k", "tool": b"\x7fELF"}
EXECUTABLE = {"run.sh", "tool"}


def _tree(root, modes):
    for relative, data in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(modes[relative])
    return root


def _members(archive):
    with tarfile.open(archive) as opened:
        return {m.name: m.mode for m in opened.getmembers()}


def test_tar_modes_are_0644_and_0755_whatever_the_sources_and_umask(tmp_path):
    plain = {name: 0o755 if name in EXECUTABLE else 0o644 for name in FILES}
    odd = {"run.sh": 0o700, "tool": 0o775, "a/data.bin": 0o600, "a/b/notes.txt": 0o664,
           "private.key": 0o400}
    reference = _tree(tmp_path / "reference", plain)
    old = os.umask(0o077)  # folders 0700, and any file written 0600
    try:
        strict = _tree(tmp_path / "strict", odd)
        write_tar_gz(tmp_path / "strict.tar.gz", strict, "top", 1767225600)
    finally:
        os.umask(old)
    write_tar_gz(tmp_path / "reference.tar.gz", reference, "top", 1767225600)
    expected = {"top": 0o755, "top/a": 0o755, "top/a/b": 0o755,
                **{f"top/{name}": 0o755 if name in EXECUTABLE else 0o644 for name in FILES}}
    assert _members(tmp_path / "strict.tar.gz") == expected
    assert file_sha256(tmp_path / "strict.tar.gz") == file_sha256(tmp_path / "reference.tar.gz")


def test_a_folders_digest_changes_with_a_renamed_or_edited_file_only(tmp_path):
    plain = {name: 0o644 for name in FILES}
    first = tree_sha256(_tree(tmp_path / "one", plain))
    assert tree_sha256(_tree(tmp_path / "elsewhere", plain)) == first  # the place is not hashed
    (tmp_path / "one/a/data.bin").rename(tmp_path / "one/a/data2.bin")
    renamed = tree_sha256(tmp_path / "one")
    assert renamed != first
    (tmp_path / "one/a/data2.bin").rename(tmp_path / "one/a/data.bin")
    assert tree_sha256(tmp_path / "one") == first
    (tmp_path / "one/a/b/notes.txt").write_bytes(b"hellO\n")
    assert tree_sha256(tmp_path / "one") not in (first, renamed)
