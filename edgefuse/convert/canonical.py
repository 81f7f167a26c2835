"""Bring any ONNX model into the one form every later stage assumes.

Why one canonical form: optimize, quantize and compile each pattern-match on the graph; if each had
to cope with dynamic dims, Shape->Gather->Concat chains, Constant nodes, stale value_info and six
opset generations, each would re-implement this file badly. So convert does it once:

  shape chains on a dimension the given shapes fix, folded while it is symbolic so the Reshapes
  still follow it (``convert.shape_arithmetic``) -> fixed input dims
  -> opset in SUPPORTED_OPSETS (converted, and verified on ONNX Runtime)
  -> strict shape inference -> constant folding (folding only: fusion is the optimize stage's job)
  -> Constant nodes lifted to initializers, dead nodes and initializers removed
  (unnamed nodes are named "<OpType>_<index>" by their place in the source graph first)
  -> provenance in metadata_props
  -> onnx.checker full check and an ONNX Runtime CPU load.

Names of nodes and values that survive are kept: users map layers by name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript.optimizer
from onnx_ir.passes.common import (
    LiftConstantsToInitializersPass,
    RemoveInitializersFromInputsPass,
    RemoveUnusedNodesPass,
    ShapeInferencePass,
)

from edgefuse._ort import ort_errors
from edgefuse.convert._respell import respell_for_opset
from edgefuse.convert.onnx_load import check_domains, check_graph_inputs, check_input_shapes
from edgefuse.convert.opset_downgrade import DowngradeError, downgrade
from edgefuse.convert.shape_arithmetic import fold_shape_arithmetic
from edgefuse.errors import InputError, ModelLoadError, Ref
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import RUN_FAILURES, run_onnx

# 11: the oldest opset ONNX Runtime, the onnx version converter and Ascend's parser all handle
# well (older models are upgraded to it). 21: the newest this release verifies end to end; CANN 7
# parses v9-v18, and the compile stage down-converts further when it targets an Ascend board.
SUPPORTED_OPSETS = range(11, 22)

# A down-conversion rewrites ops into older spellings of the same math: outputs must agree to
# float rounding, relative to each output's magnitude.
_PARITY_TOLERANCE = 1e-4
_PARITY_SEED = 0

logger = logging.getLogger(__name__)


def canonicalize(
    model: onnx.ModelProto,
    *,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    opset: int | None = None,
    provenance: Mapping[str, str] | None = None,
) -> onnx.ModelProto:
    """Check, fix shapes, convert the opset, fold constants and name nodes; returns a new model.

    ``opset`` asks for a specific opset (down-conversion is verified on ONNX Runtime); without it
    an old model is upgraded to the lowest supported opset and a supported one is left alone.
    ``provenance`` entries are recorded as ``metadata_props`` (``edgefuse.source``, ...).
    """
    shapes = dict(input_shapes or {})
    result = onnx.ModelProto()
    result.CopyFrom(model)
    check_domains(result)
    check_graph_inputs(result)
    check_input_shapes(result, shapes)
    _check_input_model(result)
    if _fixes_a_symbolic_dim(result, shapes) and _opset(result) in SUPPORTED_OPSETS:
        _name_unnamed_nodes(result.graph, prefix="")  # by their index in the source graph
        result = _fold_shape_chains_while_symbolic(result)
    _fix_input_dims(result, shapes)
    converted_from = _opset(result)
    result = _convert_opset(result, _target_opset(converted_from, opset))
    _raise_ir_version(result)
    result = _infer_shapes(result)
    _name_unnamed_nodes(result.graph, prefix="")  # before folding: indices of the source graph
    result = _fold_constants(result)
    result = _infer_shapes(result)
    _name_unnamed_nodes(result.graph, prefix="")  # nodes the folder created
    metadata = dict(provenance or {})
    if converted_from is not None and converted_from != _opset(result):
        metadata["edgefuse.converted_from_opset"] = str(converted_from)
    _set_metadata(result, metadata)
    final_check(result)
    return result


def final_check(model: onnx.ModelProto) -> None:
    """The ONNX checker (full, with strict shape inference) and an ORT CPU session load."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ModelLoadError(
            "the converted model fails the ONNX checker",
            context=str(exc),
            hint="run with -v to see each step; if the source model is valid, this is an "
            "edgefuse bug: please report it with the model",
            reference=Ref.INVALID_MODEL,
        ) from exc
    error = ort_load_error(model)
    if error is not None:
        raise ModelLoadError(
            "ONNX Runtime cannot load the converted model",
            context=error,
            hint="an op or opset ONNX Runtime does not implement; try another --opset",
            reference=Ref.INVALID_MODEL,
        )


def ort_load_error(model: onnx.ModelProto) -> str | None:
    """Why ONNX Runtime (CPU, optimizations off) refuses the model, or None when it loads."""
    import onnxruntime as ort  # noqa: PLC0415 - keep `import edgefuse.convert` light

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except ort_errors() as exc:
        return str(exc)
    return None


def _check_input_model(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ModelLoadError(
            "the model is not valid ONNX",
            context=str(exc).strip(),
            hint="re-export it, or open it in Netron to find the node named above",
            reference=Ref.INVALID_MODEL,
        ) from exc


def _opset(model: onnx.ModelProto) -> int | None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return None


def _target_opset(current: int | None, requested: int | None) -> int | None:
    supported = f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}"
    if requested is not None:
        if requested not in SUPPORTED_OPSETS:
            raise InputError(
                f"opset {requested} is not supported",
                hint=f"choose an opset in {supported}",
                reference=Ref.UNSUPPORTED_OPSET,
            )
        return requested
    if current is None or current in SUPPORTED_OPSETS:
        return current
    if current < SUPPORTED_OPSETS.start:
        return SUPPORTED_OPSETS.start
    raise InputError(
        f"the model uses opset {current}, newer than the supported {supported}",
        hint=f"down-convert it (verified on ONNX Runtime) with --opset {SUPPORTED_OPSETS.stop - 1}",
        reference=Ref.UNSUPPORTED_OPSET,
    )


def _fix_input_dims(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Write the given shapes into the graph inputs and drop shapes inferred from the old ones."""
    if not shapes:
        return
    for value in model.graph.input:
        if value.name not in shapes:
            continue
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for size in shapes[value.name]:
            shape.dim.add().dim_value = size
    del model.graph.value_info[:]


def _fixes_a_symbolic_dim(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    for value in model.graph.input:
        if value.name in shapes and any(
                not dim.HasField("dim_value") for dim in value.type.tensor_type.shape.dim):
            return True
    return False


def _fold_shape_chains_while_symbolic(model: onnx.ModelProto) -> onnx.ModelProto:
    """The shape chains on a symbolic dimension (a dynamic batch) folded to Reshape constants
    that follow it (0: copy the dimension), before the given input shape fixes it.

    Why first: once the batch is fixed to the given 1, folding bakes that 1 into every Reshape,
    and the canonical model runs at batch 1 only: ``compile --dynamic-batch`` then fails with
    ``gear-shape-fails`` on a model the user exported with ``dynamic=True``. Folded this way, the
    model is the same at the given shape and still runs at any batch.
    """
    ir_model = ir.serde.deserialize_model(model)
    RemoveInitializersFromInputsPass()(ir_model)
    onnxscript.optimizer.fold_constants(ir_model, onnx_shape_inference=True)
    respell_for_opset(ir_model)
    ShapeInferencePass(strict_mode=False)(ir_model)  # the batch's name on every value
    if not fold_shape_arithmetic(ir_model):
        return model
    RemoveUnusedNodesPass()(ir_model)
    return ir.serde.serialize_model(ir_model)


def _raise_ir_version(model: onnx.ModelProto) -> None:
    """At least the IR version the opsets need (an opset-8 model may still say IR 3).

    Why: IR 3 requires every initializer to be listed as a graph input too; the canonical model
    keeps weights out of the inputs (they are constants, not things a caller feeds).
    """
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    model.ir_version = max(model.ir_version, needed)


def _convert_opset(model: onnx.ModelProto, target: int | None) -> onnx.ModelProto:
    current = _opset(model)
    if target is None or current is None or current == target:
        return model
    logger.info("converting opset %d -> %d", current, target)
    if target > current:
        converted = _upgrade(model, current, target)
    else:
        converted = _downgrade(model, current, target)
    _verify_conversion(model, converted, current, target)
    return converted


def _upgrade(model: onnx.ModelProto, current: int, target: int) -> onnx.ModelProto:
    try:
        return _onnx_version_converter(model, target)
    except (RuntimeError, ValueError, onnx.checker.ValidationError) as exc:
        raise ModelLoadError(
            f"the onnx version converter cannot upgrade this model from opset {current} to "
            f"{target}",
            context=str(exc).strip(),
            hint="re-export the model at a newer opset",
            reference=Ref.OPSET_CONVERSION_FAILED,
        ) from exc


def _downgrade(model: onnx.ModelProto, current: int, target: int) -> onnx.ModelProto:
    """edgefuse's table-driven down-converter first, onnx's converter when the table refuses.

    onnx's converter alone fails on most modern graphs: it has no down-adapter for ops whose
    newer version only widened the types (Relu 14 -> 13). The compile stage shares the table.
    """
    try:
        return downgrade(model, target)
    except DowngradeError as table_error:
        try:
            return _onnx_version_converter(model, target)
        except (RuntimeError, ValueError, onnx.checker.ValidationError) as converter_error:
            raise ModelLoadError(
                f"cannot down-convert this model from opset {current} to {target}",
                context=f"edgefuse: {table_error}\nonnx version converter: "
                f"{str(converter_error).strip()}",
                hint="choose a higher --opset; for a PyTorch source, --exporter torchscript "
                "builds opsets below 18 directly",
                reference=Ref.OPSET_CONVERSION_FAILED,
            ) from converter_error


def _onnx_version_converter(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    converted = onnx.version_converter.convert_version(model, target)
    onnx.checker.check_model(converted)
    return converted


def _verify_conversion(
    before: onnx.ModelProto, after: onnx.ModelProto, current: int, target: int
) -> None:
    """Run both models on the same seeded inputs; a converter that changed the math is an error.

    An upgrade of a model that ONNX Runtime cannot run at its old opset is accepted unverified
    (with a warning); a down-conversion is only accepted verified.
    """
    feeds = random_feeds(input_specs(before), seed=_PARITY_SEED)
    try:
        expected = run_onnx(before, feeds)
    except RUN_FAILURES as exc:
        if target > current:
            logger.warning(
                "opset %d -> %d upgrade not verified: ONNX Runtime cannot run the original (%s)",
                current, target, exc.message,
            )
            return
        raise ModelLoadError(
            f"cannot verify the down-conversion from opset {current} to {target}: ONNX Runtime "
            "cannot run the original model",
            context=exc.message,
            reference=Ref.OPSET_CONVERSION_FAILED,
        ) from exc
    try:
        actual = run_onnx(after, feeds)
    except RUN_FAILURES as exc:
        raise ModelLoadError(
            f"the model converted from opset {current} to {target} does not run",
            context=exc.message,
            hint="choose a higher --opset",
            reference=Ref.OPSET_CONVERSION_FAILED,
        ) from exc
    mismatches = [
        line for name, reference in expected.items()
        if (line := _mismatch(name, reference, actual.get(name))) is not None
    ]
    if mismatches:
        raise ModelLoadError(
            f"converting from opset {current} to {target} changed the model's outputs",
            context="\n".join(mismatches) + f"\n(seeded random inputs, seed {_PARITY_SEED})",
            hint="choose a higher --opset; the down-conversion mis-translated an op",
            reference=Ref.OPSET_CONVERSION_MISMATCH,
        )


def _mismatch(name: str, expected: np.ndarray, actual: np.ndarray | None) -> str | None:
    if actual is None:
        return f"output '{name}' is missing after conversion"
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (
            f"output '{name}': {actual.dtype}{list(actual.shape)} after conversion, "
            f"{expected.dtype}{list(expected.shape)} before"
        )
    if not np.issubdtype(expected.dtype, np.floating):
        return None if np.array_equal(expected, actual) else f"output '{name}' differs"
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    error = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
    if np.isnan(error) or error > _PARITY_TOLERANCE * scale:
        return f"output '{name}': max |difference| {error:.3g} (largest |value| {scale:.3g})"
    return None


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        raise ModelLoadError(
            "shape inference failed: the graph is inconsistent with its input shapes",
            context=str(exc).strip(),
            hint="check the --input shapes against what the model expects",
            reference=Ref.SHAPE_INFERENCE_FAILED,
        ) from exc


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Fold what depends only on constants and static shapes; lift and drop the leftovers.

    Only folding: onnxscript's rewrite rules (fusions) are the optimize stage's business. The
    folder writes some replacements in opset-18 spelling; ``respell_for_opset`` fixes them.
    """
    ir_model = ir.serde.deserialize_model(model)
    RemoveInitializersFromInputsPass()(ir_model)
    onnxscript.optimizer.fold_constants(ir_model, onnx_shape_inference=True)
    respelled = respell_for_opset(ir_model)
    if respelled:
        logger.info("respelled %d folded nodes for opset %s", respelled, _opset(model))
    RemoveUnusedNodesPass()(ir_model)
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(ir_model)
    RemoveUnusedNodesPass()(ir_model)
    return ir.serde.serialize_model(ir_model)


def _name_unnamed_nodes(graph: onnx.GraphProto, prefix: str) -> None:
    """Name nameless nodes "<OpType>_<index>" (index in the node list), never reusing a name."""
    taken = {node.name for node in graph.node if node.name}
    for index, node in enumerate(graph.node):
        if not node.name:
            name, suffix = f"{prefix}{node.op_type}_{index}", 1
            while name in taken:
                name, suffix = f"{prefix}{node.op_type}_{index}_{suffix}", suffix + 1
            node.name = name
            taken.add(name)
        for attribute in node.attribute:
            subgraphs = [*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])]
            for subgraph in subgraphs:
                _name_unnamed_nodes(subgraph, prefix=f"{node.name}/{attribute.name}/")


def _set_metadata(model: onnx.ModelProto, entries: Mapping[str, str]) -> None:
    kept = [prop for prop in model.metadata_props if prop.key not in entries]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in entries.items():
        model.metadata_props.add(key=key, value=value)
