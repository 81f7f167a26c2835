"""The last seconds of a stream as encoded H.264 packets, from which a clip starts.

Why packets and not frames: five seconds of 1080p frames are 150 x 6 MB = 900 MB of BGR; the
same five seconds encoded are a few megabytes (bench/video_writer.py measures it), and a clip
cut from them needs no decoding and no second encoding. A clip must start on a keyframe, so the
ring keeps everything since the last keyframe at or before ``keep_s`` before the newest packet:
with keyframes every ``keyframe_s`` it holds at most ``keep_s + keyframe_s`` seconds.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Held:
    """One packet and the clock of the frame it encodes (seconds, the stream's media time)."""

    packet: Any
    clock: float
    index: int  # the frame's index in its source


class PacketRing:
    """Packets of one stream, oldest first, trimmed to ``keep_s`` seconds (module docstring)."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._held: collections.deque[Held] = collections.deque()
        self.bytes = 0  # the packets' payload, what the ring costs in memory

    def __len__(self) -> int:
        return len(self._held)

    def add(self, packet: Any, clock: float, index: int) -> None:
        self._held.append(Held(packet, clock, index))
        self.bytes += packet.size
        self._trim(clock - self.keep_s)

    def since(self, clock: float) -> list[Held]:
        """The packets from the last keyframe at or before ``clock`` (or the oldest keyframe
        held, when the stream is younger than that) to the newest."""
        held = list(self._held)
        start = next((i for i in range(len(held) - 1, -1, -1)
                      if held[i].packet.is_keyframe and held[i].clock <= clock), None)
        if start is None:
            start = next((i for i, h in enumerate(held) if h.packet.is_keyframe), len(held))
        return held[start:]

    def _trim(self, oldest_wanted: float) -> None:
        """Drop packets before the last keyframe at or before ``oldest_wanted``."""
        keep_from = None
        for position, held in enumerate(self._held):
            if held.clock > oldest_wanted:
                break
            if held.packet.is_keyframe:
                keep_from = position
        for _ in range(keep_from or 0):
            self.bytes -= self._held.popleft().packet.size
