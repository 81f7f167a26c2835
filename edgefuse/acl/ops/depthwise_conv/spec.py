"""DepthwiseConv: per-channel convolution, ``y[c] = B[c] + sum_ij W[c,0,i,j] * x_pad[c, shifted]``.

Exactly: ``y[n, c, h, w] = B[c] + sum_{i,j} W[c, 0, i, j] * x_pad[n, c, h*sh + i*dh, w*sw + j*dw]``
with ``x_pad`` zero-padded by ``pads`` (ONNX ``Conv`` with ``group = C``).

Why a hand-written kernel: a depthwise convolution has no reduction over channels; run as a
matrix product on the cube unit it becomes a block-diagonal product that is mostly zeros, and the
default path moves data in layouts chosen for dense convolutions. The TBE kernel
(``tbe/impl/edgefuse_depthwise_conv2d.py``) keeps the activation in ``NC1HWC0``: the 16
channels of a C0 block are one 32-byte block, so one vector ``vmla`` multiplies 8 output pixels
x 16 channels by their 16 per-channel weights (the weight block is broadcast with a block stride
of 0), and input rows move from global memory as whole contiguous bursts while the previous
row computes (double buffering).

Expected benefit -- a claim to measure on a board, not a measured number: fewer, longer DMA
bursts and 128 multiply-adds per vector instruction should make this kernel faster than the
default lowering for 3x3/5x5 depthwise layers of MobileNet-style models, most for wide feature
maps. ``bench`` on a device decides; until then the optimizer does not emit this op on its own.

The decomposition is ONNX's grouped ``Conv`` with ``group = channels``; ``channels`` is an
attribute because ONNX's ``group`` must be static. Only depth multiplier 1 is supported
(``W`` is ``[C, 1, kh, kw]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.acl.ops.spec import AttrSpec, OpSpec, OpTensor, Shape, require, require_rank

NAME = "DepthwiseConv"


def _output_size(size, pad_begin: int, pad_end: int, kernel, stride: int, dilation: int):
    if not isinstance(size, int) or not isinstance(kernel, int):
        return None
    return (size + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride + 1


def _shapes(shapes: Sequence[Shape | None], attrs: Mapping[str, Any]) -> list[Shape]:
    x = require_rank(NAME, "x", shapes[0], 4)
    w = require_rank(NAME, "filter", shapes[1], 4)
    channels = attrs["channels"]
    if x is not None and isinstance(x[1], int):
        require(x[1] == channels, NAME, f"x has {x[1]} channels but channels={channels}")
    if w is not None:
        if isinstance(w[0], int):
            require(w[0] == channels, NAME, f"filter has {w[0]} output channels, not {channels}")
        if isinstance(w[1], int):
            require(w[1] == 1, NAME, f"filter must be [C, 1, kh, kw] (multiplier 1), got {w}")
    if x is None:
        return [(None, channels, None, None)]
    kh, kw = (w[2], w[3]) if w is not None else (None, None)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs["strides"], attrs["dilations"], attrs["pads"]
    height = _output_size(x[2], pt, pb, kh, sh, dh)
    width = _output_size(x[3], pl, pr, kw, sw, dw)
    for size in (height, width):
        require(size is None or size > 0, NAME, "the kernel is larger than the padded input")
    return [(x[0], channels, height, width)]


def _check(attrs: Mapping[str, Any]) -> None:
    require(attrs["channels"] > 0, NAME, "channels must be positive")
    require(len(attrs["strides"]) == 2 and min(attrs["strides"]) > 0, NAME, "strides: 2 values > 0")
    require(len(attrs["dilations"]) == 2 and min(attrs["dilations"]) > 0, NAME, "dilations: 2 > 0")
    require(len(attrs["pads"]) == 4 and min(attrs["pads"]) >= 0, NAME, "pads: 4 values >= 0")


def _reference(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any]) -> list:
    x, w, b = inputs
    _, _, height, width = _shapes([x.shape, w.shape], attrs)[0]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = attrs["strides"], attrs["dilations"], attrs["pads"]
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    out = np.zeros((x.shape[0], x.shape[1], height, width))
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            window = padded[
                :,
                :,
                i * dh : i * dh + sh * (height - 1) + 1 : sh,
                j * dw : j * dw + sw * (width - 1) + 1 : sw,
            ]
            out += window * w[:, 0, i, j].astype(np.float64)[None, :, None, None]
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return [out.astype(x.dtype)]


DEPTHWISE_CONV = OpSpec(
    name=NAME,
    doc=__doc__.splitlines()[0],
    package=__name__.rpartition(".")[0],
    inputs=(
        OpTensor("x", "activation [N, C, H, W]", "T", ("float16",), ("NC1HWC0",)),
        OpTensor("filter", "weights [C, 1, kh, kw]", "T", ("float16",), ("NCHW",)),
        OpTensor("bias", "per-channel bias [C]", "T", ("float16",), ("ND",), optional=True),
    ),
    outputs=(OpTensor("y", "[N, C, H_out, W_out]", "T", ("float16",), ("NC1HWC0",)),),
    attributes=(
        AttrSpec("channels", "int", "number of channels C (ONNX Conv's group)"),
        AttrSpec("strides", "ints", "stride along H and W", (1, 1)),
        AttrSpec("pads", "ints", "[top, left, bottom, right] as in ONNX Conv", (0, 0, 0, 0)),
        AttrSpec("dilations", "ints", "dilation along H and W", (1, 1)),
    ),
    type_constraints=(("T", ("tensor(float16)", "tensor(float)")),),
    shape_function=_shapes,
    check_attributes=_check,
    reference_function=_reference,
    function_body="""
    y = Conv <group: int = @channels, strides: ints = @strides, pads: ints = @pads,
              dilations: ints = @dilations> (x, filter, bias)
    """,
    ascend_type="EdgefuseDepthwiseConv2d",
    infer_shape_cpp="""
  // Shapes here are the origin (NCHW) shapes: x [N, C, H, W], filter [C, 1, kh, kw].
  const TensorDesc x_desc = op.GetInputDescByName("x");
  const std::vector<int64_t> x = x_desc.GetShape().GetDims();
  const std::vector<int64_t> w = op.GetInputDescByName("filter").GetShape().GetDims();
  std::vector<int64_t> strides;
  std::vector<int64_t> pads;
  std::vector<int64_t> dilations;
  if (op.GetAttr("strides", strides) != GRAPH_SUCCESS ||
      op.GetAttr("pads", pads) != GRAPH_SUCCESS ||
      op.GetAttr("dilations", dilations) != GRAPH_SUCCESS) {
    return GRAPH_FAILED;
  }
  const int64_t kh = dilations[0] * (w[2] - 1) + 1;
  const int64_t kw = dilations[1] * (w[3] - 1) + 1;
  const int64_t ho = (x[2] + pads[0] + pads[2] - kh) / strides[0] + 1;
  const int64_t wo = (x[3] + pads[1] + pads[3] - kw) / strides[1] + 1;
  TensorDesc y_desc = op.GetOutputDescByName("y");
  y_desc.SetShape(ge::Shape(std::vector<int64_t>{x[0], x[1], ho, wo}));
  y_desc.SetDataType(x_desc.GetDataType());
  return op.UpdateOutputDesc("y", y_desc);
""",
    verify_cpp="""
  const std::vector<int64_t> x = op.GetInputDescByName("x").GetShape().GetDims();
  const std::vector<int64_t> w = op.GetInputDescByName("filter").GetShape().GetDims();
  int64_t channels = 0;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads;
  std::vector<int64_t> dilations;
  if (op.GetAttr("channels", channels) != GRAPH_SUCCESS ||
      op.GetAttr("strides", strides) != GRAPH_SUCCESS ||
      op.GetAttr("pads", pads) != GRAPH_SUCCESS ||
      op.GetAttr("dilations", dilations) != GRAPH_SUCCESS) {
    return GRAPH_FAILED;
  }
  if (x.size() != 4 || w.size() != 4 || x[1] != channels || w[0] != channels || w[1] != 1) {
    return GRAPH_FAILED;
  }
  if (strides.size() != 2 || pads.size() != 4 || dilations.size() != 2) {
    return GRAPH_FAILED;
  }
  return GRAPH_SUCCESS;
""",
)
