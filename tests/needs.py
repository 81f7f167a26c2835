"""Optional test dependencies: skipped on a contributor's machine without them, an error in CI.

Why not ``pytest.importorskip``: a CI whose install step silently lost torch would skip every
torch test and still pass. With ``CI`` set in the environment (CI services set it), a missing
dependency fails the run instead.
"""

from __future__ import annotations

import importlib
import os
import shutil
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


def without_dac_override() -> list[str]:
    """A command prefix that drops root's power to ignore file modes (nothing when not root), so
    a test of an unreadable or read-only file means the same under root as for a user."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be tested here")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]
