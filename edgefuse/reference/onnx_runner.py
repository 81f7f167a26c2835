"""Run an ONNX model on ONNX Runtime's CPU provider with graph optimizations off.

Why optimizations off: the reference judges graphs as written. With ORT's own fusions on, a broken
rewrite could be masked (or an exact one blurred) by ORT rewriting both graphs differently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from edgefuse._deps import require
from edgefuse.errors import InputError, Ref


def run_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run on ONNX Runtime CPU with graph optimizations off; outputs by name."""
    ort = require("onnxruntime", extra="gpu", purpose="Running models on the host")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    expected = {i.name for i in session.get_inputs()}
    missing, unknown = expected - set(feeds), set(feeds) - expected
    if missing or unknown:
        raise InputError(
            f"inputs do not match the model: missing {sorted(missing)}, unknown {sorted(unknown)}",
            hint=f"the model's inputs are {sorted(expected)}",
            reference=Ref.BAD_FEEDS,
        )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the named intermediate tensors (any dtype)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in present:
            exposed.graph.output.append(onnx.ValueInfoProto(name=name))
            present.add(name)
    return exposed
