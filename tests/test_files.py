"""Atomic outputs: nothing half-written is left behind, and what lands has ordinary modes."""

from __future__ import annotations

import os

import pytest

from edgefuse._files import atomic_output, umask, write_text

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_an_atomic_output_gets_the_mode_a_plain_open_would_give(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        assert umask() == mask
        write_text(tmp_path / "report.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == mode


def test_a_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "model.onnx"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="half-way"), atomic_output(target) as tmp:
        tmp.write_text("new but incomplete")
        raise RuntimeError("half-way")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
