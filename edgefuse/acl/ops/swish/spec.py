"""Swish: ``y = x * sigmoid(alpha * x)`` (SiLU when ``alpha = 1``).

Why a custom op for three ONNX nodes: on the NPU ``Mul(x, Sigmoid(x))`` is two kernels and a
round trip of the activation through global memory; one elementwise TBE kernel reads ``x`` once.
YOLOv5/v8 put a SiLU after nearly every convolution, so the ``silu-to-swish`` rule produces it for
Ascend targets. The attribute is named ``alpha`` as in ONNX's own ``Swish`` (opset 24), so a model
can move to the standard op by renaming the domain once ATC and the host runtimes support it.

Device formats: besides ``ND``/``NCHW``/``NHWC`` the kernel declares ``NC1HWC0``, the format the
convolutions around it produce; an elementwise op that did not would make GE insert a TransData
before and after every Swish. Padding channels in ``NC1HWC0`` are zero and ``swish(0) = 0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.acl.ops.spec import AttrSpec, OpSpec, OpTensor, Shape

_FORMATS = ("ND", "NCHW", "NHWC", "NC1HWC0")
_DTYPES = tuple(d for d in ("float16", "float32") for _ in _FORMATS)
_COLUMNS = _FORMATS * 2


def _shapes(shapes: Sequence[Shape | None], attrs: Mapping[str, Any]) -> list[Shape]:
    del attrs
    return [shapes[0]]


def _check(attrs: Mapping[str, Any]) -> None:
    del attrs  # every finite alpha is valid


def _reference(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any]) -> list:
    (x,) = inputs
    wide = x.astype(np.float64)
    return [(wide / (1.0 + np.exp(-attrs["alpha"] * wide))).astype(x.dtype)]


SWISH = OpSpec(
    name="Swish",
    doc=__doc__.splitlines()[0],
    package=__name__.rpartition(".")[0],
    inputs=(OpTensor("x", "input activation", "T", _DTYPES, _COLUMNS),),
    outputs=(OpTensor("y", "x * sigmoid(alpha * x)", "T", _DTYPES, _COLUMNS),),
    attributes=(AttrSpec("alpha", "float", "slope inside the sigmoid", 1.0),),
    type_constraints=(("T", ("tensor(float16)", "tensor(float)")),),
    shape_function=_shapes,
    check_attributes=_check,
    reference_function=_reference,
    function_body="""
    alpha_value = Constant <value_float: float = @alpha> ()
    alpha_t = CastLike (alpha_value, x)
    scaled = Mul (x, alpha_t)
    gate = Sigmoid (scaled)
    y = Mul (x, gate)
    """,
    ascend_type="EdgefuseSwish",
    infer_shape_cpp="""
  const TensorDesc x_desc = op.GetInputDescByName("x");
  TensorDesc y_desc = op.GetOutputDescByName("y");
  y_desc.SetShape(x_desc.GetShape());
  y_desc.SetDataType(x_desc.GetDataType());
  return op.UpdateOutputDesc("y", y_desc);
""",
    verify_cpp="""
  return GRAPH_SUCCESS;
""",
)
