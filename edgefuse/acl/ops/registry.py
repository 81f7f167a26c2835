"""Every edgefuse custom operator, in one explicit tuple.

Why explicit: an op is in the package ``edgefuse ops build`` writes, in ``inline_custom_ops`` and
in the consistency tests exactly when it is listed here; nothing registers itself on import.
"""

from __future__ import annotations

from edgefuse.acl.ops.depthwise_conv.spec import DEPTHWISE_CONV
from edgefuse.acl.ops.spec import OpSpec
from edgefuse.acl.ops.swish.spec import SWISH
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.errors import InputError, Ref

ALL_OPS: tuple[OpSpec, ...] = (SWISH, DEPTHWISE_CONV, YOLO_HEAD)
OPS_BY_NAME: dict[str, OpSpec] = {spec.name: spec for spec in ALL_OPS}


def select_ops(names: list[str] | tuple[str, ...] | None) -> tuple[OpSpec, ...]:
    """The named ops (ONNX or Ascend names), or all of them; a typo is a user error."""
    if not names:
        return ALL_OPS
    by_any = {**OPS_BY_NAME, **{spec.ascend_type: spec for spec in ALL_OPS}}
    unknown = [name for name in names if name not in by_any]
    if unknown:
        raise InputError(
            f"unknown custom op {', '.join(unknown)}",
            hint=f"known: {', '.join(OPS_BY_NAME)} (`edgefuse ops list`)",
            reference=Ref.UNKNOWN_CUSTOM_OP,
        )
    return tuple(dict.fromkeys(by_any[name] for name in names))
