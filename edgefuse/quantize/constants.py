"""Does a float32 constant survive conversion to FP16? If not, say why instead of clamping it.

Why never clamp: the common converters silently clip weights to +-1e4 (onnxconverter-common) or
+-65504 (ONNX Runtime's float16.py); a BatchNorm variance of 1e6 clipped to 65504 gives a model
that runs and is wrong. Here a constant that does not fit makes the node that reads it stay FP32,
and the report says which constant and why.

"Fits" means: every value is finite in FP16, and rounding to FP16 does not matter. Rounding
matters when the tensor as a whole changes by more than ``MAX_REL_L2`` (relative L2; plain FP16
rounding of normal numbers stays below 4.9e-4, so only values in FP16's subnormal range, below
6.1e-5, reach it), or when a small tensor (at most ``SMALL_TENSOR`` values: an epsilon, an offset,
a per-channel scale) loses a nonzero value to zero.
"""

from __future__ import annotations

import numpy as np

FP16_MAX = 65504.0
MAX_REL_L2 = 1e-3
SMALL_TENSOR = 16


def fp16_misfit(array: np.ndarray) -> tuple[str, str] | None:
    """None if ``array`` converts to FP16 harmlessly, else (cause id, explanation)."""
    values = np.asarray(array, dtype=np.float32).reshape(-1)
    if values.size == 0:
        return None
    finite = np.isfinite(values)
    if not finite.all():
        values = values[finite]  # inf/nan stay inf/nan in FP16: nothing is lost
        if values.size == 0:
            return None
    peak = float(np.max(np.abs(values)))
    if peak > FP16_MAX:
        return "constant-overflow", f"max |x| = {peak:.4g} exceeds the FP16 maximum {FP16_MAX:g}"
    rounded = values.astype(np.float16).astype(np.float32)
    if values.size <= SMALL_TENSOR:
        flushed = (values != 0) & (rounded == 0)
        if flushed.any():
            smallest = float(np.min(np.abs(values[flushed])))
            return (
                "constant-underflow",
                f"{int(flushed.sum())} nonzero value(s) (smallest |x| = {smallest:.3g}) flush to "
                "zero in FP16",
            )
    norm = float(np.linalg.norm(values))
    if norm > 0:
        rel_l2 = float(np.linalg.norm(rounded - values)) / norm
        if rel_l2 > MAX_REL_L2:
            return (
                "constant-underflow",
                f"FP16 rounding changes it by {rel_l2:.2g} (relative L2): its values lie in "
                f"FP16's subnormal range (median |x| = {np.median(np.abs(values)):.3g})",
            )
    return None
