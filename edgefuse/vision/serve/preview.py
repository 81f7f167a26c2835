"""Frames at the size a dashboard tile shows them: the JPEG decoded at 1/2, 1/4 or 1/8 scale and
encoded again, once per frame and size whoever asks.

Why: nine 1280x720 tiles in a 1280x720 window show each frame at about 320 pixels wide; sending
them whole makes the browser decode sixteen times the pixels it shows (most of a core in
headless Chromium at 9 streams x 10 fps, bench/dashboard.py) and the network carry them. libjpeg
decodes at 1/2, 1/4 and 1/8 scale inside its DCT (OpenCV's ``IMREAD_REDUCED_COLOR_*``), which
costs a fraction of a full decode, so a reduced copy is cheap enough to make on demand, only for
the frames a page is sent; the cache makes it once for all the browsers watching.
"""

from __future__ import annotations

import threading

import numpy as np

from edgefuse._cv import cv2

FACTORS = (8, 4, 2)
QUALITY = 75
SLACK = 0.8  # a tile 321 pixels wide gets the 320-pixel frame, scaled up a little, not 640


def factor_for(width: int | None, wanted: int | None) -> int:
    """The largest reduction that keeps the frame about ``wanted`` pixels wide or wider (at
    least ``SLACK`` of it; 1: none)."""
    if not width or not wanted or wanted <= 0:
        return 1
    return next((f for f in FACTORS if width / f >= wanted * SLACK), 1)


class Previews:
    """Reduced JPEGs by (stream, factor), each remembered for the frame version it was made of."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, int], tuple[int, bytes]] = {}
        self._lock = threading.Lock()

    def get(self, stream: str, version: int, jpeg: bytes, width: int | None,
            wanted: int | None) -> bytes:
        factor = factor_for(width, wanted)
        if factor == 1:
            return jpeg
        with self._lock:
            made = self._made.get((stream, factor))
        if made is not None and made[0] == version:
            return made[1]
        flag = getattr(cv2(), f"IMREAD_REDUCED_COLOR_{factor}")
        image = cv2().imdecode(np.frombuffer(jpeg, np.uint8), flag)
        ok, encoded = (False, None) if image is None else cv2().imencode(
            ".jpg", image, [cv2().IMWRITE_JPEG_QUALITY, QUALITY])
        reduced = encoded.tobytes() if ok else jpeg  # undecodable: sent as it came
        with self._lock:
            self._made[(stream, factor)] = (version, reduced)
        return reduced
