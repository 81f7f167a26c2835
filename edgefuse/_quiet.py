"""Silence a third-party logger's warnings for one call whose warning concerns its internals.

Why: a library's note about which of its own code paths it took (onnxscript's version converter
"falls back to the onnx C API", torch's "torchvision is not installed") reaches the user's
terminal as a WARNING about nothing they can act on. Errors still get through.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_logger(name: str) -> Iterator[None]:
    """Raise logger ``name`` to ERROR for the duration of the block, then restore its level."""
    target = logging.getLogger(name)
    level = target.level
    target.setLevel(logging.ERROR)
    try:
        yield
    finally:
        target.setLevel(level)
