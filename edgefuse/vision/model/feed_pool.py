"""Sets of a session's own input buffers, reused frame after frame, one per frame in flight.

Why a pool: the pipeline preprocesses frame N+1 while frame N runs (one thread per stage), so
one input buffer would be overwritten under a running model. Each frame takes a free set of
``Session.input_buffers`` (the memory the model reads: on the board, the NPU's shared memory),
the preprocessing writes the frame into it, and the run reads it in place. A set goes back to the
pool when the feeds handed out for it are dropped (CPython frees them as soon as the pipeline lets
go of the frame's feeds after the run; a batcher that stacked them lets go too), so no stage has
to remember to give it back and a frame dropped on the way cannot leak it. At ``limit`` sets in
use, ``take`` returns None and the frame goes the plain way (a feed dict of its own, copied by
the session): slower, never wrong.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping

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
        self.made = 0
        self.off_reason: str | None = None
        self._free: list[InputBuffers] = []
        self._lock = threading.Lock()

    def take(self) -> InputBuffers | None:
        """A set to write one frame into, or None (the pool is full or the session has none)."""
        with self._lock:
            if self._free:
                kept = self._free.pop()
            elif self.off_reason is None and self.made < self.limit:
                try:
                    kept = self._make()
                except InputError as exc:  # e.g. a dynamic input no shape was given for
                    self.off_reason = exc.message
                    log.debug("no input buffers for this session (%s): frames are copied",
                              exc.message)
                    return None
                self.made += 1
            else:
                return None
        lent = InputBuffers(kept.owner, kept, device_addresses=kept.device_addresses,
                            handle=kept.handle)
        weakref.finalize(lent, self._give_back, kept)
        return lent

    @property
    def free(self) -> int:
        """Sets made and not in use now."""
        with self._lock:
            return len(self._free)

    def _give_back(self, kept: InputBuffers) -> None:
        with self._lock:
            self._free.append(kept)
