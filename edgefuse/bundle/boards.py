"""The boards a bundle is built for: their OS, C library, CPU and Python, and the wheel tags pip
may take for them.

Why a table: the wheels the bundle carries must load on the board's system, and which ones do
is decided by three facts of its image: the CPU architecture, the glibc version (a
``manylinux_2_X`` wheel needs glibc >= 2.X) and the ``python3`` the service runs on. One fixed
tag (``manylinux2014_aarch64``, glibc 2.17) found onnxruntime only up to 1.16.3 on aarch64,
because later releases are tagged ``manylinux_2_27``/``manylinux_2_28``; the board's own pip
would take every tag from its glibc down to 2.17, and so does the build now
(``platform_tags``). ``target.board`` names a row; a board not in the table is described in the
spec (``target.glibc``, ``target.arch`` and ``python.version``).

Sources of the rows:

- ``atlas-200i-dk-a2``: the developer kit's images are Ubuntu 22.04 and openEuler 22.03
  (mxVision user guide, "硬件与OS要求":
  https://hiascend.com/document/detail/zh/mind-sdk/50rc1/vision/mxvisionug/mxvisionug_0011.html;
  OM SDK "Supported Product Forms":
  https://www.hiascend.com/document/detail/en/mindx-edge/latest/omsdk/omsdkug/omsdkag_0002.html).
  Ubuntu 22.04 ships glibc 2.35 (https://packages.ubuntu.com/jammy/libc6) and Python 3.10 as
  ``/usr/bin/python3`` (https://packages.ubuntu.com/jammy/python3). The Ubuntu image also carries
  a miniconda under /usr/local (release notes 23.0.RC2,
  https://www.hiascend.com/document/detail/zh/Atlas200IDKA2DeveloperKit/23.0.RC2/vd); an
  interactive shell may find its python first: install.sh refuses a ``python3`` of another
  version, so run it with ``PATH=/usr/bin:$PATH`` there.
- ``atlas-200i-dk-a2-openeuler``: the same kit's openEuler 22.03 image "uses the system's Python
  3.9.9, not miniconda" (release notes 23.0.RC3, the page above); openEuler 22.03 LTS ships
  glibc 2.34. Listed so that a spec naming it is told why it cannot be built for: edgefuse
  needs Python >= 3.10.
- ``debian-12-arm64``: Debian 12 (bookworm) arm64, glibc 2.36
  (https://packages.debian.org/bookworm/libc6), Python 3.11
  (https://packages.debian.org/bookworm/python3): the root file system of the aarch64
  rehearsal under qemu-user, the stand-in for a board's Ubuntu.
"""

from __future__ import annotations

import dataclasses
import re

ARCHES = ("aarch64", "x86_64")
# The oldest glibc a manylinux tag exists for: manylinux2014 (glibc 2.17) on every CPU but x86,
# where manylinux1 (2.5) and manylinux2010 (2.12) came first (PEP 599, PEP 600).
_OLDEST_GLIBC_MINOR = {"aarch64": 17, "x86_64": 5}
# The legacy names of manylinux_2_17, _2_12 and _2_5 (PEP 600): pip accepts both spellings.
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_GLIBC = re.compile(r"^2\.([0-9]{1,2})$")


@dataclasses.dataclass(frozen=True)
class Board:
    """A board's system as far as its Python packages are concerned."""

    name: str
    os: str
    arch: str
    glibc: str  # "2.35"
    python: str  # "3.10": the python3 the service runs on

    @property
    def platforms(self) -> list[str]:
        return platform_tags(self.arch, self.glibc)


BOARDS = {board.name: board for board in (
    Board("atlas-200i-dk-a2", "Ubuntu 22.04", "aarch64", "2.35", "3.10"),
    Board("atlas-200i-dk-a2-openeuler", "openEuler 22.03 LTS", "aarch64", "2.34", "3.9"),
    Board("debian-12-arm64", "Debian 12", "aarch64", "2.36", "3.11"),
)}
DEFAULT_BOARD = "atlas-200i-dk-a2"


def glibc_minor(glibc: str) -> int:
    """The X of glibc "2.X"; ValueError for anything else."""
    found = _GLIBC.match(glibc)
    if found is None:
        raise ValueError(f"glibc '{glibc}' is not a version 2.X")
    return int(found[1])


def platform_tags(arch: str, glibc: str) -> list[str]:
    """Every platform tag pip accepts on a glibc ``glibc`` system with CPU ``arch``, most
    specific first: ``manylinux_2_X_<arch>`` for X from the glibc's minor down to the oldest
    manylinux, each followed by its legacy alias where it has one, then ``linux_<arch>`` (a wheel
    built on such a system). The same list ``packaging.tags.platform_tags()`` gives on the board
    itself (tests/bundle/test_boards.py checks it on this host); pure ``py3-none-any`` wheels are
    accepted besides."""
    minor = glibc_minor(glibc)
    tags = []
    for version in range(minor, _OLDEST_GLIBC_MINOR[arch] - 1, -1):
        tags.append(f"manylinux_2_{version}_{arch}")
        if version in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[version]}_{arch}")
    return [*tags, f"linux_{arch}"]
