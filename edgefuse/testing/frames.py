"""Frames for tests: images from files, folders, globs and videos, or from the scene generator.

Why: a pipeline test needs real-looking frames, and neither a laptop nor CI has a camera. Files
are read with the apps' own source (``edgefuse.vision.sources``), so a test sees the frames an
app would; ``"scenes"`` draws them from the procedural scene generator
(``edgefuse.vision.scenes``), so a test needs no image files at all.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.vision.sources import open_source

SCENES = "scenes"
SCENES_MODULE = "edgefuse.vision.scenes"
DEFAULT_SCENES = 8
DEFAULT_SCENE_SIZE = (480, 640)  # height, width


def read_frames(source: Any, count: int | None = None) -> list[np.ndarray]:
    """BGR uint8 frames from an image, a folder or glob of images, or a video (at most
    ``count``)."""
    frames = []
    with open_source(source, live=False) as reader:
        for frame in reader:
            frames.append(frame.image)
            if count is not None and len(frames) >= count:
                break
    if not frames:
        raise InputError(f"no frame could be read from '{source}'", reference=Ref.BAD_SOURCE)
    return frames


def scenes_available() -> bool:
    """Whether this edgefuse has the scene generator."""
    return importlib.util.find_spec(SCENES_MODULE) is not None


def scene_frames(count: int = DEFAULT_SCENES, size: tuple[int, int] = DEFAULT_SCENE_SIZE,
                 seed: int = 0) -> list[np.ndarray]:
    """``count`` BGR frames of ``size`` (height, width) from the scene generator."""
    if not scenes_available():
        raise InputError(
            f"the scene generator ({SCENES_MODULE}) is not in this edgefuse",
            hint="read frames from files instead: edgefuse_frames('tests/frames/')",
            reference=Ref.MISSING_DEPENDENCY,
        )
    # Looked up by name: the generator is an optional part of the package (see scenes_available).
    scenes = importlib.import_module(SCENES_MODULE)
    generator = scenes.SceneGenerator(seed=seed, size=tuple(size))
    return [np.asarray(generator.scene(index).image) for index in range(count)]
