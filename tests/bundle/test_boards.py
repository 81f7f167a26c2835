"""Issue 26 §1-2: the wheel tags come from the board, and the bundle carries what its app imports.

The tag list is checked against ``packaging.tags`` (what pip computes on a machine) for this
host's own CPU and glibc; the boards' rows against the numbers their documentation gives; the
extras against the app config the service reads.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from packaging import tags

from edgefuse.bundle.app_requirements import bundle_extras
from edgefuse.bundle.boards import ARCHES, BOARDS, platform_tags
from edgefuse.bundle.spec import load_spec
from tests.bundle.models import without_app, write_spec

pytestmark = pytest.mark.unit


def test_the_tags_are_the_ones_pip_computes_on_such_a_system():
    """On this host, for its own CPU and glibc, the list is packaging's (pip's) own: every
    manylinux tag in the same order, the legacy aliases, and linux_<arch>."""
    libc, version = platform.libc_ver()
    if libc != "glibc" or platform.machine() not in ARCHES:
        pytest.skip(f"this host ({libc or 'unknown libc'}, {platform.machine()}) is not a glibc "
                    f"system on a CPU boards are made of ({', '.join(ARCHES)})")
    glibc = ".".join(version.split(".")[:2])
    ours = platform_tags(platform.machine(), glibc)
    theirs = list(tags.platform_tags())
    assert sorted(ours) == sorted(theirs)
    assert [t for t in ours if t.startswith("manylinux")] == [
        t for t in theirs if t.startswith("manylinux")]


def test_the_atlas_boards_tags_reach_onnxruntimes_aarch64_wheels():
    board = BOARDS["atlas-200i-dk-a2"]
    assert (board.os, board.arch, board.glibc, board.python) == (
        "Ubuntu 22.04", "aarch64", "2.35", "3.10")
    found = board.platforms
    assert found[0] == "manylinux_2_35_aarch64" and found[-1] == "linux_aarch64"
    # onnxruntime >= 1.20 ships manylinux_2_27/2_28 aarch64 wheels; 2014 alone stopped at 1.16.3
    assert {"manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux2014_aarch64"} <= set(
        found)
    assert not any("2_36" in tag or "x86_64" in tag for tag in found)
    assert "manylinux_2_36_aarch64" in BOARDS["debian-12-arm64"].platforms
    assert platform_tags("aarch64", "2.17") == ["manylinux_2_17_aarch64", "manylinux2014_aarch64",
                                                "linux_aarch64"]


def test_a_described_board_loads_with_its_own_tags(tmp_path):
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace('glibc: "2.17"', 'glibc: "2.31"'))
    python = load_spec(spec).python
    assert python["board"] == {"name": "build-host", "os": "described in the spec",
                               "arch": "aarch64", "glibc": "2.31"}
    assert python["platforms"][:2] == ["manylinux_2_31_aarch64", "manylinux_2_30_aarch64"]


def test_the_board_gives_the_python_version(tmp_path):
    spec = write_spec(tmp_path / "spec")
    text = spec.read_text()
    text = text[:text.index("  board: build-host")] + "  board: debian-12-arm64\n" + text[
        text.index("reproducibility:"):]
    python_at = text.index('  version: "', text.index("python:"))
    spec.write_text(text[:python_at] + "  wheels: wheelhouse\n")
    python = load_spec(spec).python
    assert python["version"] == "3.11"
    assert python["platforms"][0] == "manylinux_2_36_aarch64"


def _extras(tmp_path: Path, edit) -> list[str]:
    spec = write_spec(tmp_path / "spec")
    spec.write_text(edit(spec.read_text()))
    return bundle_extras(load_spec(spec))


def test_the_bundle_carries_the_extras_its_app_imports(tmp_path):
    assert _extras(tmp_path / "seg", lambda text: text) == ["vision"]
    assert _extras(tmp_path / "none", without_app) == []
    assert _extras(tmp_path / "asked", lambda text: without_app(text).replace(
        "wheels: wheelhouse", "wheels: wheelhouse\n  extras: [serve]")) == ["serve"]
    detection = ("app:\n  kind: detection\n  model: cls\n  source: 0\n  config: {CONFIG}\n")

    def app(config: str, service: str = ""):
        return lambda text: (text[:text.index("app:\n")] + detection.replace("{CONFIG}", config)
                             + "service:\n  environment: {EDGEFUSE_LOG: info}\n" + service
                             + text[text.index("python:\n"):])

    assert _extras(tmp_path / "det", app("{}")) == ["vision"]
    assert _extras(tmp_path / "mqtt", app("{events: {mqtt: {host: 127.0.0.1}}}")) == [
        "events", "vision"]
    assert _extras(tmp_path / "hook", app("{events: {webhook: {url: 'http://h/x'}}}")) == [
        "vision"]
    assert _extras(tmp_path / "serve", app("{serve: '127.0.0.1:8080'}")) == ["serve", "vision"]
    assert _extras(tmp_path / "health", app("{}", "  health: {port: 8080}\n")) == [
        "serve", "vision"]
