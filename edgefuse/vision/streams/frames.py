"""What flows through a pipeline: a captured ``Frame``, then the ``FrameResult`` each stage fills.

Why a leaf module: sources make frames, stages and sinks read results, and none of them should
import another to learn the shape of the data they share.

Why two capture times: a board without a battery-backed clock boots in 1970 and steps its wall
clock when NTP answers (and an operator may step it back). ``time`` (the wall clock) is only for
names and records; every duration (latency, dwell, video segments, clips) is measured on
``clock`` (``time.perf_counter``: CLOCK_MONOTONIC on Linux, never stepped) or on a file's own
``pts`` (``media_time``).

Why the image may be deferred: with ``decode: dvpp`` the model's input comes from the media
units and the BGR picture exists only if something draws, saves or shows it; converting every
frame for nobody costs a 1080p frame ~5 ms of a board's slow cores. A source hands a
``DeferredImage`` instead of an array: ``frame.image`` converts on first read (once), and
``frame.size`` answers without converting, for the records that only need the size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class DeferredImage:
    """A frame's BGR picture not made yet: ``fetch()`` makes it, ``size`` is (width, height)."""

    size: tuple[int, int]
    fetch: Callable[[], np.ndarray]


@dataclasses.dataclass
class Frame:
    """One BGR uint8 frame [h, w, 3] as a source delivered it (``image``: made on first read
    where the source deferred it)."""

    index: int  # position in the source, counting frames skipped by stride or dropped as stale
    image: np.ndarray  # a property (below): given a DeferredImage, converted on first read
    time: float  # wall-clock capture time, seconds since the epoch (time.time()): records only
    clock: float  # time.perf_counter() at capture (monotonic): latency and every duration
    pts: float | None = None  # media time in seconds (video files), None for live sources
    name: str | None = None  # file name, for image folders and single images
    decode_s: float = 0.0  # seconds the source spent reading and decoding this frame
    # decode: dvpp: the model's input (YUV420SP bytes) and its letterbox geometry, made where
    # the frame was decoded (edgefuse.vision.streams.dvpp_source); None: preprocess ``image``
    device_input: tuple[np.ndarray, Any] | None = None


def _image(frame: Frame) -> np.ndarray:
    value = frame.__dict__["_image"]
    if isinstance(value, DeferredImage):
        value = frame.__dict__["_image"] = value.fetch()
    return value


def _set_image(frame: Frame, value: np.ndarray | DeferredImage) -> None:
    frame.__dict__["_image"] = value


def _size(frame: Frame) -> tuple[int, int]:
    """(width, height) of the frame, without making a deferred image."""
    value = frame.__dict__["_image"]
    if isinstance(value, DeferredImage):
        return value.size
    return int(value.shape[1]), int(value.shape[0])


# After the dataclass is made: its __init__ assigns ``image`` through the property.
Frame.image = property(_image, _set_image)  # type: ignore[assignment]
Frame.size = property(_size)  # type: ignore[attr-defined]


def media_time(frame: Frame) -> float:
    """A frame's place in time for durations (dwell, segments, clips): a file's own timestamps
    (stride and dropped frames keep their real spacing, a fast pipeline does not shorten them),
    else the monotonic capture clock, which a wall-clock step does not move."""
    return frame.pts if frame.pts is not None else frame.clock


@dataclasses.dataclass
class FrameResult:
    """A frame and what the pipeline made of it; ``result`` is the task's (e.g. Detections)."""

    frame: Frame
    feeds: dict[str, np.ndarray] | None = None
    geometry: Any = None
    outputs: dict[str, np.ndarray] | None = None
    result: Any = None
    timings_ms: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.frame.index
