"""The copies per frame bench/dvpp.py reports (issue 30 §3/§5), as a test: through the real
AclSession over the stand-in, a frame written into the session's input buffers is read where it
was written on a shared-memory SoC (no memcpy, no staging write), and on a card costs exactly the
documented HOST_TO_DEVICE copy; a frame in arrays of its own is staged once more. With
``decode: dvpp`` on the board's units (over the media stand-in), VPC writes the model input on
the SoC: no memcpy of a frame (the coded packets into VDEC's stream buffer, one memcpy each,
are counted apart)."""

from __future__ import annotations

import sys

import pytest

from bench.dvpp import count_copies
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.fallback.test_dvpp_emulation import h264_clip
from tests.needs import optional

pytestmark = [pytest.mark.standin, pytest.mark.ort]


def test_copies_per_frame_by_target_and_feed(tmp_path, monkeypatch):
    optional("av")
    optional("cv2")
    monkeypatch.setitem(sys.modules, "acl", None)  # restored after: the bench installs its own
    clip = h264_clip(SAMPLE_CLIP, tmp_path / "clip.mp4", frames=4)  # 320x240: the letterbox pads
    rows = {(r["decode"], r["target"], r["feed"]): r for r in count_copies(str(clip), 3)}
    measured = {key: (row["cpu_copies"], {k: v for k, v in row["memcpy"].items() if v},
                      row["in_place"]) for key, row in rows.items() if row["measured"]}
    assert measured == {
        ("cpu", "soc", "copied"): (2, {}, False),  # copyMakeBorder + the session's staging
        ("cpu", "soc", "in-place"): (0, {}, True),
        ("dvpp-emulated", "soc", "copied"): (1, {}, False),  # the staging write
        ("dvpp-emulated", "soc", "in-place"): (0, {}, True),  # letterbox(out=) writes it
        ("dvpp-board", "soc", "in-place"): (0, {}, True),  # VPC wrote the model input
        ("cpu", "card", "copied"): (1, {"H2D": 1, "D2H": 1}, False),
        ("cpu", "card", "in-place"): (0, {"H2D": 1, "D2H": 1}, False),
        ("dvpp-emulated", "card", "copied"): (0, {"H2D": 1, "D2H": 1}, False),
        ("dvpp-emulated", "card", "in-place"): (0, {"H2D": 1, "D2H": 1}, False),
        # VPC's output read back (D2H) and staged (H2D), the output (D2H)
        ("dvpp-board", "card", "in-place"): (0, {"H2D": 1, "D2H": 2}, False),
    }
    assert all(row["frames"] == 3 for row in rows.values() if row["measured"])
    # besides, VDEC's input: 4 coded packets for 3 frames (x264's B-frames: one held back)
    assert [rows[("dvpp-board", t, "in-place")]["packet_copies"] for t in ("soc", "card")] == [
        4 / 3, 4 / 3]
