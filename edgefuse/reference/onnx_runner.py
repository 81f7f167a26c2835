"""Run an ONNX model on ONNX Runtime's CPU provider with graph optimizations off.

Why optimizations off: the reference judges graphs as written. With ORT's own fusions on, a broken
rewrite could be masked (or an exact one blurred) by ORT rewriting both graphs differently.

edgefuse's custom ops run through their declared decompositions, other model-local functions
through their bodies (``edgefuse.acl.ops.host``). A model ONNX Runtime cannot load (an op of a
domain it has no kernel for, a custom op without a function) is the user's to fix, so its refusal
becomes an error naming the nodes, never a traceback from ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from edgefuse._deps import require
from edgefuse._graph_walk import all_nodes
from edgefuse._ort import ort_errors
from edgefuse.acl.ops.host import host_runnable_model
from edgefuse.errors import InputError, ModelLoadError, Ref, ToolError

# What run_onnx raises when ONNX Runtime cannot load or run a model; callers that can live without
# the run (an unverifiable opset upgrade) catch these.
RUN_FAILURES = (ModelLoadError, ToolError)
# Domains ONNX Runtime's CPU provider has kernels for.
HOST_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})
_LISTED = 8


def run_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run on ONNX Runtime CPU with graph optimizations off; outputs by name."""
    ort = require("onnxruntime", extra="gpu", purpose="Running models on the host")
    runnable = host_runnable_model(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            runnable.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except ort_errors() as exc:
        raise _load_error(runnable, exc) from exc
    expected = {i.name for i in session.get_inputs()}
    missing, unknown = expected - set(feeds), set(feeds) - expected
    if missing or unknown:
        raise InputError(
            f"inputs do not match the model: missing {sorted(missing)}, unknown {sorted(unknown)}",
            hint=f"the model's inputs are {sorted(expected)}",
            reference=Ref.BAD_FEEDS,
        )
    names = [o.name for o in session.get_outputs()]
    try:
        results = session.run(names, dict(feeds))
    except ort_errors() as exc:
        raise ToolError(
            f"ONNX Runtime failed running the model: {_first_line(exc)}",
            hint="check the inputs' shapes and values against the model (edgefuse inspect "
            "MODEL shows its inputs)",
        ) from exc
    return dict(zip(names, results, strict=True))


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


def _load_error(model: onnx.ModelProto, exc: BaseException) -> ModelLoadError:
    foreign = [f"{node.name or '(unnamed)'} ({node.domain}::{node.op_type})"
               for node in all_nodes(model.graph) if node.domain not in HOST_DOMAINS]
    if foreign:
        domains = sorted({entry.split("(")[-1].split("::")[0] for entry in foreign})
        return ModelLoadError(
            f"ONNX Runtime has no kernel for {len(foreign)} node(s) of domain(s) "
            f"{', '.join(domains)}, so the model cannot run on the host",
            context="\n".join(foreign[:_LISTED]) + (
                f"\n... and {len(foreign) - _LISTED} more" if len(foreign) > _LISTED else ""),
            hint="give each custom op an ONNX function (a model-local function) or replace it "
            "with standard ops; edgefuse's own ops (domain 'edgefuse') run through their "
            "decompositions",
            reference=Ref.UNKNOWN_OP_DOMAIN,
        )
    return ModelLoadError(f"ONNX Runtime cannot load the model: {_first_line(exc)}",
                          hint="check the model with onnx.checker or `edgefuse inspect`")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
