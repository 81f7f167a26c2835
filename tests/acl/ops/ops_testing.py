"""Running one custom op on ONNX Runtime through its decomposition, for the op tests.

Why through ``inline_custom_ops``: that is the path every host backend takes, so the tests check
the decomposition exactly as users run it; ORT's own graph optimizations are off so that the
numbers are the decomposition's, not a fused kernel's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort

from edgefuse.acl.ops.host import attach_functions, inline_custom_ops
from edgefuse.acl.ops.spec import DOMAIN, FUNCTION_OPSET, OpSpec


def single_op_model(spec: OpSpec, inputs: Sequence[np.ndarray | None], **attrs) -> onnx.ModelProto:
    """A model of one ``spec`` node; ``None`` inputs are left out (optional inputs)."""
    names = [
        t.name if array is not None else "" for t, array in zip(spec.inputs, inputs, strict=True)
    ]
    while names and not names[-1]:
        names.pop()
    node = spec.make_node(names, [t.name for t in spec.outputs], **attrs)
    graph = oh.make_graph(
        [node],
        f"single_{spec.name}",
        [
            oh.make_tensor_value_info(name, oh.np_dtype_to_tensor_dtype(array.dtype), array.shape)
            for name, array in zip(names, inputs, strict=False)  # names: trailing absent cut
            if name
        ],
        [onnx.ValueInfoProto(name=t.name) for t in spec.outputs],
    )
    return oh.make_model(
        graph,
        ir_version=10,
        opset_imports=[oh.make_opsetid("", FUNCTION_OPSET), oh.make_opsetid(DOMAIN, 1)],
    )


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def run_decomposition(
    spec: OpSpec, inputs: Sequence[np.ndarray | None], *, inline: bool = True, **attrs
) -> list[np.ndarray]:
    """The op's outputs on ONNX Runtime: inlined (default) or as a model-local function."""
    model = single_op_model(spec, inputs, **attrs)
    prepared = inline_custom_ops(model) if inline else attach_functions(model)
    feeds = {t.name: a for t, a in zip(spec.inputs, inputs, strict=True) if a is not None}
    return run_ort(prepared, feeds)
