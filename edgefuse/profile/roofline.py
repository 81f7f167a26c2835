"""The board's floor: a roofline lower bound on each node's time on a SoC, from published peaks.

Why a lower bound and never a prediction: a node cannot finish before its arithmetic at the
unit's peak rate, nor before its bytes at the memory's peak bandwidth, so
``floor = max(FLOPs / peak(unit, precision), bytes / bandwidth)`` holds on any board whatever
the compiler does; how far above it the board lands depends on tiling, formats and scheduling
that no host tool can see. Everything this module returns is labelled a lower bound.

What it bounds: a row of the profile (one host kernel, standing for a group of the model's nodes)
run as one task on the board that reads its inputs from memory and writes its outputs there.
Tasks of one model on one stream run one after another, so the model's floor is the sum of its
rows'. If ATC fuses more than the host runtime did, intermediate tensors the row counts may never
reach memory on the board, and the board could go below that row's bytes term: the bound is for
the host's grouping of the nodes, and says so wherever it is shown.

The floor assumes the board runs the model at ``precision`` (FP16 by default, as an FP32 model
is compiled for the 310B): float tensors are counted at that precision's size, which can only
lower the bytes term, so the bound stays a bound. Under ``int8`` only the layers ATC's calibration
quantizes (Conv, ConvTranspose, Gemm, MatMul; not those kept FP16 by ``quantize --int8
--keep-fp16``) compute at the INT8 peak; every other row computes at the FP16 peak
(``compute_precision``), while its bytes stay counted at one byte per float (a Quant op fused into
a producer may write INT8), which keeps the bound a bound. A term whose peak is not published is
left out (``socs``). A node is *memory-bound* when its bytes term is the larger one.
"""

from __future__ import annotations

import dataclasses

from edgefuse.profile.socs import SocPeaks

PRECISION_BYTES = {"fp16": 2, "int8": 1}


@dataclasses.dataclass(frozen=True)
class Floor:
    """A lower bound on one node's time on the board, and which term sets it."""

    seconds: float
    compute_seconds: float | None  # None: the unit's peak is not published
    memory_seconds: float

    @property
    def memory_bound(self) -> bool:
        return self.memory_seconds >= (self.compute_seconds or 0.0)


def node_floor(peaks: SocPeaks, *, flops: int | None, bytes_moved: int, unit: str,
               float_itemsize: int = 4, precision: str = "fp16",
               compute_precision: str | None = None) -> Floor:
    """The lower bound for work of ``flops`` on ``unit`` moving ``bytes_moved`` (counted at the
    model's float size ``float_itemsize``, shrunk to ``precision``), computing at the peak of
    ``compute_precision`` (default: ``precision``)."""
    compute_precision = compute_precision or precision
    shrink = min(1.0, PRECISION_BYTES[precision] / float_itemsize) if float_itemsize else 1.0
    memory = bytes_moved * shrink / peaks.memory_bytes_per_s
    rates = peaks.cube_flops if unit == "cube" else peaks.vector_flops
    compute = None
    if rates is not None and compute_precision in rates and flops is not None:
        compute = flops / rates[compute_precision]
    return Floor(max(memory, compute or 0.0), compute, memory)
