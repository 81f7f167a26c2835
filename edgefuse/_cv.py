"""OpenCV, imported on first use: ``edgefuse.vision`` imports on a machine without it, and the
first call says which extra to install (``pip install 'edgefuse[vision]'``)."""

from __future__ import annotations

import functools
from types import ModuleType

from edgefuse._deps import require


@functools.cache
def cv2() -> ModuleType:
    return require("cv2", extra="vision", purpose="edgefuse.vision (frames, drawing, video)")
