"""Sets of a session's own input buffers, reused frame after frame, one per frame in flight.

Why a pool: the pipeline preprocesses frame N+1 while frame N runs (one thread per stage), so
one input buffer would be overwritten under a running model. Each frame takes a free set of
``Session.input_buffers`` (the memory the model reads: on the board, the NPU's shared memory),
the preprocessing writes the frame into it, and the run reads it in place.

When is a set free again? When nothing outside the pool refers to its memory: the feeds handed
out for a frame are fresh views of the set's arrays, and every view of them (numpy points a view
at the array that owns the memory) holds a reference to that owner, so a set whose owners are
back to the references they had when the set was made is referenced by no frame, no stage and
no caller who kept ``feeds["images"]`` (CPython's reference counts). No stage has to give a set
back, a frame dropped on the way cannot leak one, and an array a caller keeps is never
overwritten under it. At ``limit`` sets in use, ``take`` returns None and the frame goes the
plain way (arrays of its own, copied by the session): slower, never wrong.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping

import numpy as np

from edgefuse.errors import InputError
from edgefuse.session import InputBuffers, Session

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 8  # a pipeline holds queue_size + 3 frames between preprocess and infer at most


class FeedPool:
    """Hands out ``InputBuffers`` of ``session`` with ``shapes`` (for dynamic inputs); ``make``
    makes a new set instead of ``session.input_buffers(shapes)`` (the board's DVPP source: sets
    in DVPP's memory, ``input_buffers(memory=...)``, that VPC writes the model input into)."""

    def __init__(self, session: Session, shapes: Mapping[str, tuple[int, ...]] | None = None,
                 *, limit: int = DEFAULT_LIMIT,
                 make: Callable[[], InputBuffers] | None = None) -> None:
        self.session = session
        self.shapes = dict(shapes or {})
        self.limit = limit
        self._make = make or (lambda: session.input_buffers(self.shapes))
        self.off_reason: str | None = None
        self._sets: list[tuple[InputBuffers, list[int]]] = []  # a set, its owners' idle refs
        self._lock = threading.Lock()

    @property
    def made(self) -> int:
        """Sets made so far."""
        return len(self._sets)

    def take(self) -> InputBuffers | None:
        """A set to write one frame into, or None (every set is in use, or the session has
        none)."""
        with self._lock:
            for kept, idle in self._sets:
                if _references(kept) == idle:
                    return _lend(kept)
            if self.off_reason is not None or len(self._sets) >= self.limit:
                return None
            try:
                kept = self._make()
            except InputError as exc:  # e.g. a dynamic input no shape was given for
                self.off_reason = exc.message
                log.debug("no input buffers for this session (%s): frames are copied",
                          exc.message)
                return None
            self._sets.append((kept, _references(kept)))
            return _lend(kept)

    @property
    def in_use(self) -> int:
        """Sets some frame or caller still refers to."""
        with self._lock:
            return sum(_references(kept) != idle for kept, idle in self._sets)


def _lend(kept: InputBuffers) -> InputBuffers:
    """Fresh views of the set's arrays: while any view of them lives, the set is in use."""
    return InputBuffers(kept.owner, {name: array[...] for name, array in kept.items()},
                        device_addresses=kept.device_addresses, handle=kept.handle)


def _owner(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _references(kept: InputBuffers) -> list[int]:
    return [sys.getrefcount(_owner(array)) for array in kept.values()]
