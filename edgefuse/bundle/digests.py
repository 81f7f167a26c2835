"""Content hashes for cache keys: files, folders, option records and the tools that act on them.

Why the tools are part of every key: a cached FP16 model is only valid for the code that made it.
``tool_versions`` names the edgefuse version and a digest of the installed package's own files
(so an edited checkout never reuses a stale entry), the Python minor version and the versions of
the libraries that shape the bytes (onnx, ONNX Runtime, onnxscript, onnx-ir, numpy, PyTorch).
Versions are read from the installed distributions' metadata: nothing heavy is imported.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

from edgefuse import _version
from edgefuse.manifest import file_sha256

PACKAGE_DIR = Path(_version.__file__).resolve().parent
_LIBRARIES = ("numpy", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "torch", "pyyaml")
_SKIPPED_PARTS = ("__pycache__",)
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, tuples as lists."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_jsonable)


def key_of(value: Any) -> str:
    """The sha256 of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    if isinstance(value, os.PathLike):
        raise TypeError(f"a path ({value}) must not go into a cache key: hash its content")
    raise TypeError(f"{type(value).__name__} is not JSON")


def tree_files(root: Path) -> list[Path]:
    """The files under ``root`` in a fixed order, without bytecode caches."""
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in _SKIPPED_PARTS for part in relative.parts):
            continue
        if path.is_file() and path.suffix not in _SKIPPED_SUFFIXES:
            found.append(path)
    return found


def tree_sha256(root: Path) -> str:
    """A digest of a file or of a folder's relative paths and contents."""
    if root.is_file():
        return file_sha256(root)
    digest = hashlib.sha256()
    for path in tree_files(root):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(file_sha256(path).encode("ascii") + b"\n")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def package_sha256() -> str:
    """A digest of edgefuse's own installed files (code, data, templates)."""
    return tree_sha256(PACKAGE_DIR)


def library_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, Any]:
    """What made the artefacts (see the module docstring)."""
    return {
        "edgefuse": _version.__version__,
        "edgefuse_files": package_sha256(),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        **{name: library_version(name) for name in _LIBRARIES},
    }
