"""Issue 26 §1-2 against the real package index: the tiny example's requirements resolve for the
Atlas 200I DK A2 (Ubuntu 22.04 aarch64: glibc 2.35, Python 3.10) with every wheel the app
imports, each one loadable on that board.

One resolution for the module (pip's cache, ~/.cache/pip, makes a rerun quick); ``-m "not
index"`` leaves it out on a machine without the index.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging import tags
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from edgefuse.bundle.app_requirements import bundle_extras
from edgefuse.bundle.reproducible import DEFAULT_EPOCH
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.target_wheels import fetch_wheels, requirement
from edgefuse.bundle.wheel import build_wheel

pytestmark = [pytest.mark.unit, pytest.mark.index]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-camera.yaml"


@pytest.fixture(scope="module")
def resolved(tmp_path_factory) -> dict[str, Path]:
    """The example's board wheels from the index: {project name: wheel}."""
    spec = load_spec(EXAMPLE)
    scratch = tmp_path_factory.mktemp("index")
    app = build_wheel(scratch, DEFAULT_EPOCH)
    wheels = fetch_wheels(spec.python, requirement(app, bundle_extras(spec)), scratch / "wheels")
    return {str(parse_wheel_filename(wheel.name)[0]): wheel for wheel in wheels}


def test_the_example_resolves_for_the_atlas_board_with_what_its_app_imports(resolved):
    versions = {name: parse_wheel_filename(wheel.name)[1] for name, wheel in resolved.items()}
    assert versions["onnxruntime"] >= Version("1.18")  # 1.16.3 was all manylinux2014 found
    assert versions["numpy"].major == 2
    assert "opencv-python-headless" in versions and "scipy" in versions
    assert "edgefuse" in versions


def test_every_wheel_loads_on_ubuntu_22_04_aarch64_with_python_3_10(resolved):
    """Each wheel carries a tag that CPython 3.10 on aarch64 with glibc 2.35 supports, as
    ``packaging.tags`` (pip's own logic) lists them for that system."""
    platforms = [f"manylinux_2_{minor}_aarch64" for minor in range(35, 16, -1)]
    platforms += ["manylinux2014_aarch64"]
    supported = {*tags.cpython_tags((3, 10), platforms=platforms),
                 *tags.compatible_tags((3, 10), "cp310", platforms)}
    for name, wheel in resolved.items():
        assert parse_wheel_filename(wheel.name)[3] & supported, (
            f"{name}: {wheel.name} does not load on the board")
