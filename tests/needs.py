"""Optional test dependencies: skipped on a contributor's machine without them, an error in CI.

Why not ``pytest.importorskip``: a CI whose install step silently lost torch would skip every
torch test and still pass. With ``CI`` set in the environment (CI services set it), a missing
dependency fails the run instead.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def optional(module: str) -> ModuleType:
    """Import ``module`` for a test: skip without it, unless this is CI, where it must be there."""
    if os.environ.get("CI"):
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            raise RuntimeError(
                f"CI must install '{module}' for the tests that need it ({exc}); see .ci/run"
            ) from exc
    return pytest.importorskip(module)
