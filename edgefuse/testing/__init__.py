"""edgefuse's pytest kit: assertions with readable failures, and (in ``plugin``) fixtures for
sessions on builds, frames and recordings. The plugin loads with edgefuse (entry point
``pytest11``); import the assertions from here.

    from edgefuse.testing import assert_replays

    def test_the_board_contract(edgefuse_session):
        assert_replays(edgefuse_session("build/", backend="sim"), "tests/golden.npz")
"""

from edgefuse.reference.recording import Recording, load_recording
from edgefuse.testing.assertions import (
    OutputGate,
    assert_detections_match,
    assert_masks_match,
    assert_outputs_close,
    assert_replays,
)

__all__ = [
    "OutputGate",
    "Recording",
    "assert_detections_match",
    "assert_masks_match",
    "assert_outputs_close",
    "assert_replays",
    "load_recording",
]
