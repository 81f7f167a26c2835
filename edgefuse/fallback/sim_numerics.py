"""Which tensors of a build the board stores in FP16, read from the build, for the ``sim`` backend.

Why from the build: ATC's ``--precision_mode`` and the nodes kept FP32 (``--keep_dtype``) decide
the board's numerics, and ``compile`` records both in ``manifest.json`` (``"precision"``:
``precision_mode`` and ``keep_dtype_nodes``). The simulation applies exactly those decisions with
the FP16 stage's own emulation (``edgefuse.reference.fp16.fp16_storage_model``: every FP16 tensor
rounded, math in FP32), so a host test sees the rounding the board will apply, and the keep-FP32
decisions the quantize report made.

The modes (ATC ``--precision_mode``, aoepar_16_042 / canncommercial 63RC2 aoepar_16_046;
reference ascend-toolchain.md §1.5):
- ``force_fp16`` (ATC's default): every float tensor in FP16 but the kept nodes' outputs (exact,
  as the FP16 stage emulates it);
- ``must_keep_origin_dtype``: the graph's own dtypes, FP32 stays FP32 (exact);
- ``allow_fp32_to_fp16``: Cube ops (Conv, ConvTranspose, Gemm, MatMul) in FP16 and the rest in
  FP32 (approximate: a vector op whose kernel lacks FP32 is FP16 on the board);
- ``allow_mix_precision[_fp16]``: as ``force_fp16`` with the kept nodes (approximate: ATC's
  built-in black and gray lists are not known here);
- ``force_fp32`` / ``cube_fp16in_fp32out``: FP32 (approximate: on the 310/310B the Cube still
  reads FP16 inputs).
A build whose ONNX already holds FP16 tensors (compile was given an FP16 model) has exactly
those rounded, whatever the mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from edgefuse.acl.compile.precision import CUBE_OPS
from edgefuse.reference.compare import Agreement
from edgefuse.reference.fp16 import FP16_MAX, fp16_storage_model, has_fp16, tensor_types

DEFAULT_MODE = "force_fp16"  # what compile writes when nothing is said, and ATC's own default
# How far two FP16 emulations of one model may drift apart (see ``within_prediction``).
PREDICTION_ULPS = 2
PREDICTION_COSINE_SLACK = 1.5

_NOTES = {
    "force_fp16": "force_fp16: every float tensor stored in FP16 but {kept}",
    "must_keep_origin_dtype": "must_keep_origin_dtype: the graph's own dtypes (FP32 stays FP32)",
    "allow_fp32_to_fp16": "allow_fp32_to_fp16, approximated: Conv/ConvTranspose/Gemm/MatMul in "
                          "FP16, every other op in FP32 (a vector op without an FP32 kernel is "
                          "FP16 on the board); also kept FP32: {kept}",
    "allow_mix_precision": "allow_mix_precision, approximated as force_fp16 with {kept} kept "
                           "FP32 (ATC's built-in black and gray lists are not known here)",
    "force_fp32": "{mode}, approximated as FP32 throughout (on the 310/310B the Cube still reads "
                  "FP16 inputs)",
}
_APPROXIMATED = {"allow_fp32_to_fp16": "allow_fp32_to_fp16",
                 "allow_mix_precision": "allow_mix_precision",
                 "allow_mix_precision_fp16": "allow_mix_precision",
                 "force_fp32": "force_fp32", "cube_fp16in_fp32out": "force_fp32"}


@dataclasses.dataclass(frozen=True)
class SimNumerics:
    """How one build's tensors are stored on the board, as the simulation applies it."""

    mode: str
    declared_fp16: bool  # the build's ONNX holds FP16 tensors of its own
    rounds: bool  # float tensors are stored in FP16 (but the kept ones)
    keep: frozenset[str]  # nodes kept FP32 by the build (--keep_dtype)
    cube_only: bool  # only Cube ops compute in FP16 (allow_fp32_to_fp16)
    exact: bool  # emulated as the FP16 stage emulates it, not approximated
    note: str

    def kept_nodes(self, model: onnx.ModelProto) -> frozenset[str]:
        """The nodes of ``model`` that compute and store FP32 (``model`` named by
        ``name_nodes``)."""
        if not self.rounds:
            return frozenset(node.name for node in model.graph.node)
        if not self.cube_only:
            return self.keep
        return self.keep | {node.name for node in model.graph.node
                            if node.op_type not in CUBE_OPS}

    def emulate(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """``model`` (named by ``name_nodes``) computing what the board stores."""
        if self.declared_fp16:
            return fp16_storage_model(model, force_fp16=False)
        if not self.rounds:
            return model
        return fp16_storage_model(model, keep_fp32=self.kept_nodes(model), force_fp16=True)


def plan_numerics(model: onnx.ModelProto, precision: Mapping[str, Any] | None) -> SimNumerics:
    """The numerics of a build: its ONNX ``model`` and the manifest's ``"precision"`` record."""
    record = precision or {}
    mode = str(record.get("precision_mode") or DEFAULT_MODE)
    keep = frozenset(str(name) for name in record.get("keep_dtype_nodes") or ())
    if has_fp16(model, tensor_types(model)):
        return SimNumerics(mode, True, True, keep, False, True,
                           f"{mode}: the build's ONNX declares its FP16 tensors; exactly those "
                           "are stored in FP16")
    kept = f"{len(keep)} kept node(s)" if keep else "none kept"
    if mode == "must_keep_origin_dtype":
        return SimNumerics(mode, False, False, frozenset(), False, True, _NOTES[mode])
    family = _APPROXIMATED.get(mode)
    if family == "force_fp32":
        return SimNumerics(mode, False, False, frozenset(), False, False,
                           _NOTES[family].format(mode=mode))
    if family is not None:
        return SimNumerics(mode, False, True, keep, family == "allow_fp32_to_fp16", False,
                           _NOTES[family].format(kept=kept))
    return SimNumerics(mode, False, True, keep, False, True,
                       _NOTES["force_fp16"].format(kept=kept))


def name_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every unnamed node named ``sim/<index>`` (a copy when any was unnamed), so
    that each node can be kept FP32 by name."""
    if all(node.name for node in model.graph.node):
        return model
    named = onnx.ModelProto()
    named.CopyFrom(model)
    taken = {node.name for node in named.graph.node}
    for index, node in enumerate(named.graph.node):
        if not node.name:
            candidate = f"sim/{index}"
            while candidate in taken:
                candidate += "_"
            node.name = candidate
            taken.add(candidate)
    return named


def within_prediction(measured: Agreement, predicted: Agreement, largest: float) -> bool:
    """Whether the sim's error against the FP32 host (``measured``) is no more than the FP16
    stage predicted for the build (``predicted``, quantize's report on the same inputs).

    Both are FP16 storage emulations, but of two spellings of the model (the build's ONNX was
    re-spelled for ATC, and ONNX Runtime fuses the sim's graph) whose FP32 arithmetic differs in
    the last bits; where a value sits on an FP16 rounding boundary the two round it one FP16 step
    apart. So the max abs error may exceed the prediction by ``PREDICTION_ULPS`` FP16 steps at the
    output's ``largest`` magnitude, and the cosine deficit (1 - cosine) by a factor of
    ``PREDICTION_COSINE_SLACK``; anything more is a difference of the simulation's own.
    """
    step = float(np.spacing(np.float16(min(abs(largest), FP16_MAX))))
    return (measured.max_abs_error <= predicted.max_abs_error + PREDICTION_ULPS * step
            and 1 - measured.cosine <= PREDICTION_COSINE_SLACK * (1 - predicted.cosine) + 1e-12)
