"""A live source's slot and reconnects, driven by a scripted device and events: the frame handed
over is the newest one read, and the backoff waits are the policy's (recorded, never slept)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edgefuse.errors import InputError, Ref
from edgefuse.vision.streams.sources import LiveSource, Reconnect
from edgefuse.vision.streams.stats import PipelineStats

pytestmark = pytest.mark.unit

TIMEOUT = 10.0  # only ever reached when the code under test is broken


def _image(number: int) -> np.ndarray:
    return np.full((4, 6, 3), number, np.uint8)


class HeldDevice:
    """Hands out ``count`` frames at once, then blocks its next read until released."""

    def __init__(self, count: int) -> None:
        self.count, self.reads = count, 0
        self.waiting, self.release_read = threading.Event(), threading.Event()

    def read(self):
        if self.reads == self.count:
            self.waiting.set()  # the frames before were all published
            self.release_read.wait(TIMEOUT)
            return False, None
        self.reads += 1
        return True, _image(self.reads - 1)

    def release(self) -> None:
        self.release_read.set()


def test_the_frame_handed_over_is_the_newest_and_the_older_ones_count_as_dropped():
    device = HeldDevice(3)
    source = LiveSource("held", lambda: device)
    stats = PipelineStats([])
    source.attach(stats)
    try:
        assert device.waiting.wait(TIMEOUT)
        frame = source.read(timeout=TIMEOUT)
        assert frame.index == 2 and int(frame.image[0, 0, 0]) == 2
        assert stats.counter("dropped") == 2
    finally:
        device.release_read.set()
        source.close()


class ScriptedDevice:
    """Gives its frames, then reports the stream dropped."""

    def __init__(self, first: int, count: int) -> None:
        self.numbers = list(range(first, first + count))

    def read(self):
        return (True, _image(self.numbers.pop(0))) if self.numbers else (False, None)

    def release(self) -> None:
        pass


class RecordedWaits(LiveSource):
    """Records each backoff wait instead of spending it."""

    def __init__(self, *args, **kwargs) -> None:
        self.waits: list[float] = []
        super().__init__(*args, **kwargs)

    def _pause(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return False


def _opener(script):
    """Each call takes the next item: a device is returned, an exception raised."""
    calls = iter(script)

    def opener():
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    return opener


def _refused() -> InputError:
    return InputError("cannot open the stream", reference=Ref.BAD_SOURCE)


def test_backoff_doubles_up_to_the_maximum_and_resets_after_a_reconnect():
    policy = Reconnect(attempts=10, backoff_s=0.5, max_backoff_s=1.5)
    script = [ScriptedDevice(0, 1), _refused(), _refused(), _refused(), ScriptedDevice(1, 1),
              _refused(), ScriptedDevice(2, 1), *[_refused()] * 10]
    source = RecordedWaits("scripted", _opener(script), reconnect=policy)
    stats = PipelineStats([])
    source.attach(stats)
    numbers = []
    with pytest.raises(InputError, match="10 reconnect attempts failed") as caught:
        while (frame := source.read(timeout=TIMEOUT)) is not None:
            numbers.append(int(frame.image[0, 0, 0]))
    source.close()
    assert caught.value.reference == Ref.SOURCE_LOST.value
    # the reader may replace a frame before it is read; the last one is always handed over
    assert numbers[-1] == 2 and numbers == sorted(set(numbers))
    assert len(numbers) + stats.counter("dropped") == 3
    assert source.waits == [0.5, 1.0, 1.5, 1.5,  # three refusals, then the device
                            0.5, 1.0,  # the wait starts over after a reconnect
                            0.5, 1.0, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5]  # gives up
    assert stats.counter("reconnects") == 2


def test_states_go_down_up_and_lost_in_order_and_reach_a_listener_set_late():
    """A listener set after the states were told (the app sets it once the sinks exist) gets
    them all, in order; every drop is counted."""
    script = [ScriptedDevice(0, 1), _refused(), ScriptedDevice(1, 1), _refused(), _refused()]
    source = RecordedWaits("scripted", _opener(script),
                           reconnect=Reconnect(attempts=2, backoff_s=0.1))
    stats = PipelineStats([])
    source.attach(stats)
    with pytest.raises(InputError, match="lost the stream"):
        while source.read(timeout=TIMEOUT) is not None:
            pass
    told = []
    source.on_state(lambda state, detail: told.append((state, detail)))
    source.close()
    assert [state for state, _ in told] == ["down", "up", "down", "lost"]
    assert told[1][1] == "reconnected (attempt 2)" and "2 reconnect attempts" in told[3][1]
    assert stats.counter("drops") == 2 and stats.counter("reconnects") == 1
