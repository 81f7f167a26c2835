"""The CANN toolkits edgefuse's op packages target, and the vendor names a package may carry.

Why a range: the op packages are TBE projects (DSL and TIK kernels in Python, op-info ``.ini``,
``msopgen -lan py`` skeletons), and TBE custom-op development is being closed in favour of Ascend
C. The TBE guide of the newest community editions opens with "TBE算子开发后续版本不再演进，推荐参考
《Ascend C算子开发指南》" and links the 8.5.0 Ascend C guide (hiascend CANNCommunityEdition
others/tbeaicpudevg/atlasopdev_10_0001.html); from 8.5 on the TBE pages also stop listing the
Atlas 200/300/500 inference products (the vexp page, canncommercial/850
API/aicpuopapi/atlaste_07_0012.html, against canncommercial/80RC2's). So the packages target the
toolkits before 8.5, and ``edgefuse ops build`` (and the generated ``build.sh``) refuse others.
The lower bound is [INFERENCE]: 6.0 is the oldest toolkit whose documentation shows every piece
the project relies on together -- the ``tbe`` Python namespace (``from tbe import tik``; 5.x
spelled it ``te``), per-vendor installs under ``vendors/<vendor>`` and ``msopgen -f onnx``; no
page states a first version outright.

A toolkit's version is read the way ``edgefuse.acl.atc.runner.cann_version`` reads it, from
``ascend_toolkit_install.info``; versions are spelled ``7.0.RC1``, ``8.0.0``, ``6.3.RC2.alpha001``
and only major.minor decide.
"""

from __future__ import annotations

import re

from edgefuse.errors import InputError, Ref, ToolError

CANN_MIN = (6, 0)  # inclusive
CANN_BELOW = (8, 5)  # exclusive: TBE development closed, see the module docstring
CANN_RANGE = "CANN {}.{} up to, not including, {}.{}".format(*CANN_MIN, *CANN_BELOW)

# [INFERENCE] The docs give no character set for a vendor name. It becomes a directory under
# vendors/, an entry of the comma-separated load_priority in vendors/config.ini, a CMake cache
# value and a shell variable; every documented example (customize, the samples' vendor names)
# fits letters, digits, '_' and '-', starting with a letter.
VENDOR_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def parse_cann_version(text: str | None) -> tuple[int, int] | None:
    """``"8.0.RC3"`` -> ``(8, 0)``; None when ``text`` does not start with major.minor."""
    match = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def cann_in_range(version: str | None) -> bool | None:
    """Whether the op packages target ``version``; None when it cannot be told."""
    parsed = parse_cann_version(version)
    if parsed is None:
        return None
    return CANN_MIN <= parsed < CANN_BELOW


def check_cann_version(version: str | None, home: object) -> None:
    """Refuse a toolkit outside ``CANN_RANGE`` (an unknown version passes; the caller says so)."""
    if cann_in_range(version) is not False:
        return
    newer = parse_cann_version(version) >= CANN_BELOW
    why = (
        "TBE custom-op development is closed from CANN 8.5 on in favour of Ascend C"
        if newer
        else "it lacks the tbe namespace and vendors/ layout the project uses"
    )
    raise ToolError(
        f"the CANN toolkit at {home} is {version}; edgefuse's op packages target {CANN_RANGE} "
        f"({why})",
        hint="source the set_env.sh of a toolkit in that range, or compile the model without "
        "custom ops: `edgefuse compile MODEL --soc SOC -o BUILD_DIR --no-custom-ops`",
        reference=Ref.UNSUPPORTED_CANN,
    )


def validate_vendor(name: str) -> str:
    """``name`` when it is a vendor name CANN and the generated scripts can carry as it is."""
    if VENDOR_PATTERN.fullmatch(name):
        return name
    raise InputError(
        f"vendor name {name!r} is not allowed",
        hint="use 1 to 64 letters, digits, '_' or '-', starting with a letter (it becomes the "
        "directory vendors/<vendor> and an entry of vendors/config.ini), e.g. --vendor edgefuse",
        reference=Ref.BAD_VENDOR_NAME,
    )
