"""BatchNormalization in inference form as a per-channel affine map, shared by the BN rules.

In inference mode ``BN(x) = gamma * (x - mean) / sqrt(var + eps) + beta``, which is
``x * scale + shift`` with ``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale``
along axis 1. Every BN rule folds that affine map into something else; computing it in float64
keeps the folded weights as close to the original arithmetic as float32 storage allows.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from edgefuse.optimize.rule import float_dtype, require_constants


def bn_affine(result: MatchResult, bn_node: ir.Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of an inference-mode BatchNormalization, or None with the reason set."""
    if bn_node.attributes.get_int("training_mode", 0) != 0:
        result.fail(f"BatchNormalization '{bn_node.name}' has training_mode=1")
        return None
    if len(bn_node.outputs) > 1 and any(out.uses() for out in bn_node.outputs[1:]):
        result.fail(f"BatchNormalization '{bn_node.name}' exposes its running statistics")
        return None
    if not float_dtype(result, bn_node.inputs[0]):
        return None
    gamma, beta, mean, var = bn_node.inputs[1:5]
    arrays = require_constants(result, scale=gamma, B=beta, input_mean=mean, input_var=var)
    if not arrays:
        return None
    eps = bn_node.attributes.get_float("epsilon", 1e-5)
    scale = arrays["scale"].astype(np.float64) / np.sqrt(
        arrays["input_var"].astype(np.float64) + eps
    )
    shift = arrays["B"].astype(np.float64) - arrays["input_mean"].astype(np.float64) * scale
    return scale, shift


def per_channel_bias(bias: np.ndarray | None, channels: int) -> np.ndarray:
    """A Conv/Gemm bias as a float64 vector of ``channels`` (zeros when the op has none)."""
    if bias is None:
        return np.zeros(channels, dtype=np.float64)
    return np.broadcast_to(bias.astype(np.float64).reshape(-1), (channels,)).copy()
