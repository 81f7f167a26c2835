"""Precision decisions -> ATC's ``--keep_dtype`` file and ``--modify_mixlist`` JSON.

Why: ATC compiles in fp16 by default (``--precision_mode=force_fp16``), and a few accuracy-critical
nodes (a detection head's box decode, a softmax over many classes) must stay fp32. The FP16 stage
decides which; this module turns that decision into the two files ATC reads.

The decision's JSON shape (written by the FP16 stage, read by ``--keep-fp32-from R.json``)::

    {"keep_fp32": {"nodes": ["/head/Sigmoid", ...], "op_types": ["Softmax", ...]}}

``nodes`` are ONNX node names, ``op_types`` ONNX op types; other keys of the file are ignored.

Formats (CANN ATC parameter pages):
- ``--keep_dtype=FILE``: one entry per line, an op name as in the original model, or
  ``OpType::<Ascend IR type>``; no effect with ``must_keep_origin_dtype``
  (hiascend CANNCommunityEdition/910 devaids/atctool/atlasatcparam_16_0074.html). edgefuse writes
  node names only: op types are expanded to the model's nodes of that type, because an ONNX type
  often has no single Ascend IR type (its parser plugin expands it into a subgraph).
- ``--modify_mixlist=FILE`` (``allow_mix_precision`` modes only):
  ``{"black-list": {"to-add": [<Ascend IR types>]}}`` keeps those IR types in fp32
  (Atlas200IDKA2DeveloperKit 23.0.RC2 Appendices/ttmutat/atctool_000096.html). Op types whose
  plugin maps to one IR type are black-listed; the rest rely on ``--keep_dtype`` by name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import onnx

from edgefuse.acl.atc.options import KEEP_DTYPE_IGNORED_MODES, MIXED_PRECISION_MODES
from edgefuse.acl.compile.opsupport import load_table, opset_imports
from edgefuse.errors import InputError, Ref

KEEP_DTYPE_FILE = "keep_dtype.cfg"
MIXLIST_FILE = "modify_mixlist.json"


@dataclasses.dataclass(frozen=True)
class KeepFp32:
    """Nodes and op types that must compute in fp32 on the board."""

    nodes: tuple[str, ...] = ()
    op_types: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.nodes or self.op_types)


NOTHING_KEPT = KeepFp32()


@dataclasses.dataclass(frozen=True)
class PrecisionPlan:
    mode: str
    keep_dtype_text: str | None  # contents of keep_dtype.cfg, or None when not needed
    mixlist: dict[str, Any] | None  # contents of modify_mixlist.json
    decisions: dict[str, Any]  # what goes into the manifest


def read_keep_fp32(path: str | os.PathLike[str]) -> KeepFp32:
    """The ``keep_fp32`` decision of an FP16-stage report (see the module docstring)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"cannot read the precision report '{path}': {exc}",
            reference=Ref.BAD_PRECISION_REPORT,
        ) from exc
    keep = data.get("keep_fp32") if isinstance(data, dict) else None
    if not isinstance(keep, dict):
        raise InputError(
            f"'{path}' has no \"keep_fp32\" object",
            hint='expected {"keep_fp32": {"nodes": [...], "op_types": [...]}}',
            reference=Ref.BAD_PRECISION_REPORT,
        )
    lists = {}
    for key in ("nodes", "op_types"):
        value = keep.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(
                f"'{path}': keep_fp32.{key} must be a list of strings",
                reference=Ref.BAD_PRECISION_REPORT,
            )
        lists[key] = tuple(value)
    return KeepFp32(lists["nodes"], lists["op_types"])


@dataclasses.dataclass(frozen=True)
class KeepPlan:
    """``KeepFp32`` resolved against one model: the work that reads the graph, done once.

    ``for_mode`` then writes the ATC files of any precision mode without touching the model, so a
    report that shows several modes, or a build that picks one, plans once.
    """

    keep: KeepFp32
    node_names: tuple[str, ...]  # every node kept: the named ones, then those of the op types
    ir_types: tuple[str, ...]  # Ascend IR types of the op types kept wholesale
    notes: tuple[str, ...]

    def for_mode(self, mode: str) -> PrecisionPlan:
        """The ``--keep_dtype`` / ``--modify_mixlist`` files for ``--precision_mode=mode``."""
        decisions: dict[str, Any] = {
            "precision_mode": mode,
            "keep_fp32": {"nodes": list(self.keep.nodes), "op_types": list(self.keep.op_types)},
            "keep_dtype_nodes": [],
            "mixlist_black_list": [],
            "notes": list(self.notes),
        }
        if not self.keep:
            return PrecisionPlan(mode, None, None, decisions)
        if mode in KEEP_DTYPE_IGNORED_MODES:
            decisions["notes"].append(
                f"{mode} keeps every op in the model's own precision; ATC ignores --keep_dtype "
                "there, so no keep list is written")
            return PrecisionPlan(mode, None, None, decisions)
        decisions["keep_dtype_nodes"] = list(self.node_names)
        keep_text = "".join(f"{name}\n" for name in self.node_names) or None
        mixlist = None
        if mode in MIXED_PRECISION_MODES and self.keep.op_types:
            decisions["mixlist_black_list"] = list(self.ir_types)
            if self.ir_types:
                mixlist = {"black-list": {"to-add": list(self.ir_types)}}
        return PrecisionPlan(mode, keep_text, mixlist, decisions)


def plan_keep_fp32(model: onnx.ModelProto, keep: KeepFp32) -> KeepPlan:
    """Resolve ``keep`` against ``model``; node names the model lacks are an error."""
    names = [node.name for node in model.graph.node]
    unknown = sorted(set(keep.nodes) - set(names))
    if unknown:
        raise InputError(
            f"keep-fp32 names {len(unknown)} nodes the prepared model does not have",
            context="\n".join(unknown[:20]),
            hint="node names must match the ONNX given to compile (check them in Netron)",
            reference=Ref.UNKNOWN_KEEP_FP32_NODE,
        )
    by_type = [n.name for n in model.graph.node if n.op_type in keep.op_types and n.name]
    absent_types = sorted(set(keep.op_types) - {n.op_type for n in model.graph.node})
    notes = (f"no node of op types {absent_types} in the model",) if absent_types else ()
    ir_types = tuple(_ir_types(model, keep.op_types)) if keep.op_types else ()
    return KeepPlan(keep, tuple(dict.fromkeys([*keep.nodes, *by_type])), ir_types, notes)


# Ops the AI Core's Cube unit computes; on the 310 and 310B it multiplies in float16 only.
CUBE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
_FP16_CUBE_FAMILIES = ("ascend310", "ascend310b")


def origin_dtype_warning(model: onnx.ModelProto, mode: str, soc_family: str) -> str | None:
    """Why ``must_keep_origin_dtype`` will hurt this model on this chip, or None.

    The mode keeps every op in its original dtype and "does not support lowering precision": an
    op whose AI Core kernel lacks float32 runs as an AI CPU op if one exists, else the build
    fails (CANN 6.3 ATC guide, --precision_mode, canncommercial/63RC2 atctool_000093). The Cube
    kernels of the Ascend 310 and 310B take float16 only, so every float32 convolution and matrix
    product of an FP32 model goes to the board's slow ARM cores, or the build stops.
    """
    if mode != "must_keep_origin_dtype" or soc_family not in _FP16_CUBE_FAMILIES:
        return None
    float32 = onnx.TensorProto.FLOAT
    inputs = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    inputs.update({t.name: t.data_type for t in model.graph.initializer})
    cube = [n.name or n.op_type for n in model.graph.node if n.op_type in CUBE_OPS
            and any(inputs.get(name) == float32 for name in n.input[1:2])]
    if not cube:
        return None
    return (f"--precision_mode=must_keep_origin_dtype keeps {len(cube)} float32 "
            f"convolution/matrix node(s) in float32, which the {soc_family} AI Core cannot run: "
            "ATC sends them to the AI CPU (far slower) or fails; use force_fp16 with a keep list "
            "(edgefuse quantize --report, compile --keep-fp32-from) instead")


def plan_precision(model: onnx.ModelProto, mode: str, keep: KeepFp32) -> PrecisionPlan:
    """Turn ``keep`` into ATC files for ``mode``; unknown node names are an error."""
    return plan_keep_fp32(model, keep).for_mode(mode)


def _ir_types(model: onnx.ModelProto, op_types: Iterable[str]) -> list[str]:
    """Ascend IR types for ONNX op types that map to exactly one (not a PartitionedCall)."""
    table = load_table()
    opset = opset_imports(model).get("", 0)
    found: dict[str, None] = {}
    for op_type in op_types:
        entry = table.ops.get(op_type)
        ir_type = entry.ir_type(opset) if entry is not None else None
        if ir_type and ir_type != "PartitionedCall":
            found.setdefault(ir_type, None)
    return list(found)
