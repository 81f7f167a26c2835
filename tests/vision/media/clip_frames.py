"""Frames whose index can be read back after H.264: two flat grey halves, the index's tens of
``BASE`` on the left and its units on the right."""

from __future__ import annotations

import numpy as np

from edgefuse.vision.streams.frames import Frame, FrameResult

STEP = 4  # grey levels between digits: H.264 keeps a flat area within +-1
BASE = 50


def flat(index: int, width: int = 160, height: int = 120) -> np.ndarray:
    image = np.empty((height, width, 3), np.uint8)
    image[:, :width // 2] = 16 + STEP * (index // BASE)
    image[:, width // 2:] = 16 + STEP * (index % BASE)
    return image


def read_index(image: np.ndarray) -> int:
    width = image.shape[1]
    high, low = (int(round((float(half.mean()) - 16) / STEP))
                 for half in (image[:, 8:width // 2 - 8], image[:, width // 2 + 8:-8]))
    return high * BASE + low


def result(index: int, fps: float, *, origin: float = 1_800_000_000.0) -> FrameResult:
    """Frame ``index`` of a file at ``fps`` (pts from 0; capture times from ``origin``)."""
    return FrameResult(Frame(index, flat(index), origin + index / fps, 0.0, pts=index / fps))


def decode(path) -> list[tuple[float, int]]:
    """(seconds, frame index read back) of every frame of the video at ``path``."""
    import av  # noqa: PLC0415 - optional: the tests that call this require it first

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [(float(frame.pts * stream.time_base), read_index(frame.to_ndarray(format="bgr24")))
                for frame in container.decode(stream)]
