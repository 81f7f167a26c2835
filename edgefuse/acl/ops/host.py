"""Running models with edgefuse custom ops on host backends, through the ops' decompositions.

Why: a model the Ascend pipeline rewrote carries ``edgefuse::Swish`` / ``edgefuse::YoloHead``
nodes; ATC maps them to the custom kernels, but ONNX Runtime, the verifier and Netron only know
them through their ONNX functions. ``attach_functions`` makes the model self-describing (the
functions travel as model-local functions, which ONNX Runtime runs directly);
``inline_custom_ops`` replaces the nodes by their bodies for tools that do not run functions, and
``host_runnable_model`` does that for every host runner (the ONNX Runtime backends, verify).

Two ONNX rules shape this module:

- a model-local function must import the model's version of the default domain; the bodies are
  written for opset ``FUNCTION_OPSET`` (18), so a model below it is converted up first (ONNX's
  up-adapters cover the standard ops; edgefuse nodes pass through unchanged) and a model above
  it gets functions that import its version;
- ``onnx.inliner`` does not substitute a function's default attribute values, so every attribute
  of an edgefuse node is written out first.
"""

from __future__ import annotations

import onnx
import onnx.helper
import onnx.inliner
import onnx_ir as ir
import onnxscript.version_converter

from edgefuse._graph_walk import all_nodes
from edgefuse._quiet import quiet_logger
from edgefuse.acl.ops.registry import ALL_OPS, OPS_BY_NAME
from edgefuse.acl.ops.spec import DOMAIN, FUNCTION_OPSET, OpSpec, register_onnx_schemas
from edgefuse.acl.ops.specialize import specialized_function
from edgefuse.errors import InputError, ModelLoadError, Ref


def custom_op_nodes(graph: ir.Graph) -> list[ir.Node]:
    """Every edgefuse-domain node of ``graph``, subgraphs included."""
    return [node for node in ir.traversal.RecursiveGraphIterator(graph) if node.domain == DOMAIN]


def _spec_of(node: ir.Node) -> OpSpec:
    spec = OPS_BY_NAME.get(node.op_type)
    if spec is None:
        raise InputError(
            f"node '{node.name}' is {DOMAIN}::{node.op_type}, which this edgefuse does not know",
            hint=f"known {DOMAIN} ops: {', '.join(OPS_BY_NAME)}",
            reference=Ref.UNKNOWN_CUSTOM_OP,
        )
    return spec


def attach_functions_ir(model: ir.Model) -> bool:
    """Give ``model`` the functions of the edgefuse ops it uses; whether anything changed.

    In place, for the optimizer's passes; ``attach_functions`` is the ModelProto version.
    """
    nodes = custom_op_nodes(model.graph)
    if not nodes:
        return False
    register_onnx_schemas(ALL_OPS)
    changed = False
    specs: dict[str, OpSpec] = {}
    for node in nodes:
        spec = specs.setdefault(node.op_type, _spec_of(node))
        given = {name: attr.value for name, attr in node.attributes.items()}
        for name, value in spec.resolve_attributes(given).items():
            if name not in node.attributes:
                node.attributes[name] = ir.convenience.convert_attribute(
                    name, list(value) if isinstance(value, tuple) else value
                )
                changed = True
    # Functions attached at another opset (the model was down-converted for ATC since) would
    # stop the version converter's inliner; they are rebuilt from the specs below.
    stale = [
        key
        for key, function in model.functions.items()
        if key[0] == DOMAIN and function.opset_imports.get("") != model.opset_imports.get("")
    ]
    for key in stale:
        del model.functions[key]
        changed = True
    if model.opset_imports.get("", 0) < FUNCTION_OPSET:
        source = model.opset_imports.get("", 0)
        # Below its own range onnxscript's converter hands over to onnx's, and warns that it does.
        with quiet_logger("onnxscript.version_converter"):
            onnxscript.version_converter.convert_version(model, FUNCTION_OPSET, fallback=True)
        if model.opset_imports.get("", 0) < FUNCTION_OPSET:  # the converter only warns
            raise InputError(
                f"the model (opset {source}) could not be converted to opset {FUNCTION_OPSET}, "
                f"which the decompositions of its {DOMAIN} ops need",
                hint=f"convert it first: onnx.version_converter.convert_version(model, "
                f"{FUNCTION_OPSET}), and check the error it reports",
                reference=Ref.OPSET_CONVERSION_FAILED,
            )
        changed = True
    if model.opset_imports.get(DOMAIN) is None:
        model.opset_imports[DOMAIN] = next(iter(specs.values())).version
        changed = True
    opset = model.opset_imports[""]
    for spec in specs.values():
        key = (DOMAIN, spec.name, "")
        if key not in model.functions:
            model.functions[key] = ir.serde.deserialize_function(spec.function_proto(opset))
            changed = True
    return changed


def attach_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` that carries the decomposition of every edgefuse op it uses."""
    ir_model = ir.serde.deserialize_model(model)
    if attach_functions_ir(ir_model):
        return ir.serde.serialize_model(ir_model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def inline_custom_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose edgefuse nodes are replaced by their decompositions.

    Each node gets its own rendering of the decomposition, its attributes written in as
    constants and what they compute folded (``specialize``), so that NonMaxSuppression's
    thresholds are the constants ATC requires. The model's own local functions are left as
    they are; a model without edgefuse nodes comes back unchanged (but for a copy), so a
    runtime may call this on every model it opens.
    """
    attached = attach_functions(model)
    nodes = [node for node in all_nodes(attached.graph) if node.domain == DOMAIN]
    if not nodes:
        return attached
    opset = next(e.version for e in attached.opset_import if e.domain in ("", "ai.onnx"))
    rendered = []
    for index, node in enumerate(nodes):
        spec = OPS_BY_NAME[node.op_type]  # attach_functions refused unknown ones
        given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        rendered.append(specialized_function(spec, given, opset, f"{spec.name}_{index}"))
        node.op_type = rendered[-1].name
        del node.attribute[:]
    kept_functions = [f for f in attached.functions if f.domain != DOMAIN]
    del attached.functions[:]
    attached.functions.extend(kept_functions + rendered)
    inlined = onnx.inliner.inline_selected_functions(
        attached, [(DOMAIN, function.name) for function in rendered]
    )
    left = custom_op_nodes(ir.serde.deserialize_graph(inlined.graph))
    if left:
        raise RuntimeError(f"onnx.inliner left {DOMAIN} nodes in place: {left[0].op_type}")
    kept = [f for f in inlined.functions if f.domain != DOMAIN]
    del inlined.functions[:]
    inlined.functions.extend(kept)
    opsets = [entry for entry in inlined.opset_import if entry.domain != DOMAIN]
    del inlined.opset_import[:]
    inlined.opset_import.extend(opsets)
    return inlined


def board_ops(model: onnx.ModelProto) -> list[str]:
    """The edgefuse ops ``model`` holds in the default domain, as ``edgefuse compile`` prepares
    them for ATC's parser plugins (no standard ONNX op has their names)."""
    return sorted({node.op_type for node in all_nodes(model.graph)
                   if node.domain in ("", "ai.onnx") and node.op_type in OPS_BY_NAME
                   and not onnx.defs.has(node.op_type)})


def refuse_board_ops(model: onnx.ModelProto, label: str) -> None:
    """A prepared model (a BUILD_DIR's) whose edgefuse ops are in the default domain is the
    board's program: ONNX Runtime has no kernel for them, and running their decompositions on
    the CPU would skip what the board does (FP16, the head's candidate cap). Say which backends
    run it, instead of ONNX Runtime's ``No Op registered for YoloHead``."""
    found = board_ops(model)
    if found:
        raise ModelLoadError(
            f"{label} ends in edgefuse's board op{'s' * (len(found) > 1)} {', '.join(found)}, "
            f"as `edgefuse compile` prepares {'them' if len(found) > 1 else 'it'} for the NPU: "
            "ONNX Runtime (cpu, cuda) cannot run it",
            hint="run the build on the board (--backend acl) or simulated on this host "
                 "(--backend sim; open_session(BUILD_DIR, 'sim')); for cpu or cuda, give the "
                 ".onnx model the build was compiled from",
            reference=Ref.BOARD_OPS_NEED_NPU,
        )


def host_runnable_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as ONNX Runtime can run it: every model-local function call replaced by its body.

    Custom ``edgefuse`` ops ship as model-local functions (their decompositions into standard
    ops): ATC keeps the node for its custom-op package, host backends run the decomposition.
    When every custom op is one edgefuse declares (``edgefuse.acl.ops``), its declared
    decomposition is used, with the node's default attributes written out (``onnx.inliner``
    does not substitute them); other custom ops must carry their own function. A custom-domain
    node without a decomposition is an error: no host backend could run it, and so is a
    prepared model's board op (``refuse_board_ops``).
    """
    refuse_board_ops(model, "the model")
    custom = {node.op_type for node in all_nodes(model.graph) if node.domain == DOMAIN}
    if custom and custom <= OPS_BY_NAME.keys():
        model = inline_custom_ops(model)
    defined = {(f.domain, f.name) for f in model.functions}
    missing = sorted({
        f"{node.domain}::{node.op_type}" for node in all_nodes(model.graph)
        if node.domain == DOMAIN and (node.domain, node.op_type) not in defined
    })
    if missing:
        raise ModelLoadError(
            f"the model uses custom op(s) {', '.join(missing)} without a decomposition",
            hint="export with edgefuse so each custom op carries its ONNX function, or run the "
            "model on the acl backend where the op is compiled in",
            reference=Ref.CUSTOM_OP_WITHOUT_DECOMPOSITION,
        )
    if not model.functions:
        return model
    inlined = onnx.inliner.inline_local_functions(model)
    used = {node.domain for node in all_nodes(inlined.graph)}
    kept = [o for o in inlined.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    del inlined.opset_import[:]
    inlined.opset_import.extend(kept)
    return inlined
