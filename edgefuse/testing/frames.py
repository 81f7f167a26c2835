"""Frames for tests: images from files, folders, globs and videos, or from the scene generator.

Why: a pipeline test needs real-looking frames, and neither a laptop nor CI has a camera. Files
are read with the apps' own source (``edgefuse.vision.streams.sources``), so a test sees the
frames an app would; ``"scenes"`` draws them from the procedural scene generator
(``edgefuse.vision.scenes.shapes``), so a test needs no image files at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.vision.scenes.shapes import SceneGenerator
from edgefuse.vision.streams.sources import open_source

SCENES = "scenes"
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


def scene_frames(count: int = DEFAULT_SCENES, size: tuple[int, int] = DEFAULT_SCENE_SIZE,
                 seed: int = 0) -> list[np.ndarray]:
    """``count`` BGR frames of ``size`` (height, width) from the scene generator."""
    generator = SceneGenerator(seed=seed, size=tuple(size))
    return [np.asarray(generator.scene(index).image) for index in range(count)]
