"""The pipeline sink that feeds ``LiveState``: each finished frame (the liveness the health check
and systemd's watchdog share), its counts and stats, and, when a page shows it, the annotated
frame as JPEG.

Why encode here, in the sink thread: JPEG encoding is the expensive part of serving MJPEG, and
OpenCV's encoder releases the GIL, so it overlaps inference like the other sinks; the web server
then only copies bytes, whatever the number of browsers watching. Counts are the frame's own
(a ``TrackedResult``'s, made in the postprocess thread with that frame), so the page shows the
counts of the frame it shows and never reads a counter while another thread updates it.
Without a page (``encode=False``) the sink asks for no image: nothing is drawn or encoded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.vision.serve.state import LiveState
from edgefuse.vision.streams.frames import FrameResult
from edgefuse.vision.streams.sinks import Sink


class LiveSink(Sink):
    def __init__(self, state: LiveState, stream: str, *, quality: int = 80,
                 counts: Callable[[], dict[str, Any]] | None = None,
                 stats: Callable[[], dict[str, Any]] | None = None,
                 encode: bool = True) -> None:
        self.state, self.stream, self.quality = state, stream, quality
        self._counts, self._stats = counts, stats
        self.needs_image = encode

    def write(self, result: FrameResult, image: np.ndarray | None) -> None:
        jpeg = None
        if image is not None and self.needs_image:
            ok, encoded = cv2().imencode(".jpg", image, [cv2().IMWRITE_JPEG_QUALITY, self.quality])
            jpeg = encoded.tobytes() if ok else None
        counts = self._counts() if self._counts else getattr(result.result, "counts", None)
        self.state.frame(self.stream, jpeg, counts=counts,
                         width=image.shape[1] if jpeg is not None else None,
                         stats=self._stats() if self._stats else None)

    def close(self) -> None:
        self.state.end(self.stream)
