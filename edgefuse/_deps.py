"""Lazy imports of optional dependencies.

Why: ``import edgefuse`` must work on a board without PyTorch and on a laptop without pyACL. Heavy
or device-only packages are imported where they are needed, and a missing one becomes a
``MissingDependencyError`` that names the extra to install instead of a bare ImportError.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from edgefuse.errors import MissingDependencyError


def require(module: str, *, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise an error that says which edgefuse extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name != module and not module.startswith(exc.name):
            raise  # the package is there but broken: not the user's missing extra
        raise MissingDependencyError(module, extra, purpose) from exc


def require_torch(purpose: str) -> ModuleType:
    """Import torch, naming the ``torch`` extra when it is missing."""
    return require("torch", extra="torch", purpose=purpose)
