"""How many bytes of Unified Buffer an AI Core of the target has: the YoloHead kernel's candidate
cap depends on it (``edgefuse.acl.ops.yolo_head.spec.candidate_capacity``).

Why it matters: the kernel reads ``get_soc_spec("UB_SIZE")`` when ATC builds it, so the board's
cap follows the toolkit; compile's overflow warning and ``sim``'s emulation of the cap must use
the same figure, or ``sim`` keeps candidates the board drops. Where CANN's TBE is importable (a
toolkit host after ``set_env.sh``) the figure is the toolkit's own: ``set_current_compile_soc_info``
then ``get_soc_spec("UB_SIZE")``, "an int for the Unified Buffer size, in bytes" (hiascend
canncommercial/800 apiref/aicpuopapi/atlasplatform_07_0005.html and _0003.html). Elsewhere it
comes from ``UB_BYTES`` (its sources are named there). Compile records the figure and its source
in the manifest (``custom_ops.unified_buffer``) and ``sim`` reads it back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.acl.ops.yolo_head.spec import UB_BYTES

TOOLKIT = "toolkit: tbe.common.platform.get_soc_spec('UB_SIZE')"
TABLE = "edgefuse's table (Ascend C kernel_utils_constants.h TOTAL_UB_SIZE)"


@dataclasses.dataclass(frozen=True)
class UnifiedBuffer:
    bytes: int | None  # None: no figure for this soc (no kernel of ours runs there)
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "source": self.source}


def unified_buffer(soc: str) -> UnifiedBuffer:
    """The UB size of ``soc``'s AI Core, from the toolkit where it is importable, else the table."""
    family = validate_soc(soc).short_name
    try:
        from tbe.common import platform  # noqa: PLC0415 - CANN's TBE: only on a toolkit host
    except ImportError:
        return UnifiedBuffer(UB_BYTES.get(family), TABLE)
    if platform.set_current_compile_soc_info(soc) != "success":
        return UnifiedBuffer(UB_BYTES.get(family), f"{TABLE}; the toolkit does not know {soc}")
    return UnifiedBuffer(int(platform.get_soc_spec("UB_SIZE")), TOOLKIT)
