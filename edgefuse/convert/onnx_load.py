"""Read an ONNX file and check what the rest of edgefuse takes for granted about it.

Why these checks up front: protobuf parses almost any bytes into *some* message, onnx.load reports a
missing external-data file as a checker error about a "regular file", and an unknown op domain or
a dynamic dimension otherwise surfaces much later as an ATC failure on the board. Each case here
becomes a ModelLoadError that says what is wrong, where, and what to do.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import external_data_helper

from edgefuse.convert.input_spec import format_shape
from edgefuse.errors import InputError, ModelLoadError, Ref

# Op domains edgefuse's later stages (ORT, the Ascend compiler, edgefuse's own ops) understand.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "edgefuse"})

_LISTED = 8  # how many offending nodes or names an error message lists


def load_onnx(path: str | os.PathLike[str], *, external_data: bool = True) -> onnx.ModelProto:
    """Parse an ONNX file and (unless told not to: a reader of its metadata only) its external
    data into one in-memory model."""
    source = Path(path)
    if not source.exists():
        raise InputError(
            f"no such file: '{source}'",
            hint="check the path (relative paths are taken from the current directory)",
            reference=Ref.FILE_NOT_FOUND,
        )
    if source.is_dir():
        raise InputError(f"'{source}' is a directory, not a model file",
                         reference=Ref.BAD_MODEL_FILE)
    data = read_bytes(source)
    model = _parse(data, source)
    if external_data:
        _load_external_data(model, source)
    return model


def read_bytes(path: Path) -> bytes:
    """A file's bytes; a file that is there but cannot be read is the user's to fix."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(
            f"cannot read '{path}': {exc.strerror or exc}",
            hint="check the file's permissions (ls -l) and that it is a regular file",
            reference=Ref.CANNOT_READ,
        ) from exc


def load_model(
    source: str | os.PathLike[str] | onnx.ModelProto, *, copy: bool = True
) -> onnx.ModelProto:
    """A model from a path (checked like ``load_onnx``) or a ModelProto (copied unless told not to).

    Why the copy: the stages rewrite what they load, and a caller's ModelProto must come back
    exactly as it was handed in.
    """
    if not isinstance(source, (onnx.ModelProto, str, os.PathLike)):
        raise InputError(
            f"a model must be an ONNX file path or an onnx.ModelProto, got "
            f"{type(source).__name__}",
            reference=Ref.BAD_MODEL_SOURCE,
        )
    if not isinstance(source, onnx.ModelProto):
        model = load_onnx(source)
    elif copy:
        model = onnx.ModelProto()
        model.CopyFrom(source)
    else:
        model = source
    check_structure(model)
    return model


def check_output_shapes(model: onnx.ModelProto, *, where: str = "the model") -> None:
    """Every graph output has a shape, declared or inferable; a user error naming them if not.

    Why on the input: a stage that checks only its result (optimize, quantize) would otherwise
    blame itself ("optimize produced a model the checker rejects", exit 3) for what the input
    brought: an output computed from a custom-domain op, whose shapes ONNX cannot infer, and
    declared without a shape. A shapeless output of standard ops is fine: inference fills it in.
    """
    shapeless = _shapeless_outputs(model)
    if shapeless:
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
            inferred = model  # what inference refuses, the checks after loading report
        shapeless = _shapeless_outputs(inferred)
    if not shapeless:
        return
    custom = sorted({f"{node.domain}::{node.op_type}" for node in model.graph.node
                     if node.domain not in ("", "ai.onnx", "ai.onnx.ml")})
    raise ModelLoadError(
        f"{where}: graph output(s) {', '.join(shapeless[:_LISTED])} have no shape, and ONNX "
        "shape inference cannot give them one",
        context=f"custom-domain ops it cannot infer through: {', '.join(custom[:_LISTED])}"
        if custom else None,
        hint="declare the outputs' shapes where the model is exported (for example "
             "onnx.helper.make_tensor_value_info(name, elem_type, shape) in graph.output)",
        reference=Ref.INVALID_MODEL,
    )


def _shapeless_outputs(model: onnx.ModelProto) -> list[str]:
    return [value.name for value in model.graph.output
            if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape")]


def check_structure(model: onnx.ModelProto, *, where: str = "the model") -> None:
    """Refuse a model no stage can work on: an unset or future IR version, a default-domain opset
    newer than this onnx knows, a value written by two nodes, or a cycle.

    Why here, and not onnx.checker: optimize, quantize and verify would otherwise fail deep inside
    onnx-ir or ONNX Runtime, and the traceback would blame edgefuse for the model's problem; the
    checker itself refuses models every runtime loads (a value_info without a shape), so only
    what breaks the stages is checked.
    """
    if not 0 < model.ir_version <= onnx.IR_VERSION:
        raise ModelLoadError(
            f"{where} has IR version {model.ir_version}; this onnx reads 1 to {onnx.IR_VERSION}",
            hint="re-export it with the onnx package edgefuse uses, or upgrade onnx",
            reference=Ref.INVALID_MODEL,
        )
    newest = onnx.defs.onnx_opset_version()
    opset = next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), None)
    if opset is not None and opset > newest:
        raise ModelLoadError(
            f"{where} declares opset {opset}, newer than the newest this onnx knows ({newest})",
            hint="re-export the model at an opset edgefuse supports (11-21), or convert it: "
            "edgefuse convert MODEL -o OUT --opset 17",
            reference=Ref.UNSUPPORTED_OPSET,
        )
    _check_single_assignment(model.graph, where)
    _check_acyclic(model.graph, where)


def _check_single_assignment(graph: onnx.GraphProto, where: str) -> None:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                raise ModelLoadError(
                    f"{where} is not valid ONNX: value '{name}' is produced more than once "
                    f"(again by {node.op_type} '{node.name or '(unnamed)'}')",
                    hint="every value must have exactly one producer; re-export the model",
                    reference=Ref.INVALID_MODEL,
                )
            defined.add(name)


def _check_acyclic(graph: onnx.GraphProto, where: str) -> None:
    """Kahn's algorithm over the main graph: a graph merely out of order is fine (optimize sorts
    it), one whose nodes wait on each other in a circle is not."""
    producer = {name: index for index, node in enumerate(graph.node) for name in node.output}
    waiting = [{producer[i] for i in node.input if i in producer} for node in graph.node]
    readers: dict[int, list[int]] = {}
    for index, sources in enumerate(waiting):
        for source in sources:
            readers.setdefault(source, []).append(index)
    ready = [index for index, sources in enumerate(waiting) if not sources]
    done = 0
    while ready:
        current = ready.pop()
        done += 1
        for reader in readers.get(current, ()):
            waiting[reader].discard(current)
            if not waiting[reader]:
                ready.append(reader)
    if done < len(graph.node):
        stuck = [n.name or f"{n.op_type} -> {n.output[0]}" for n, s in zip(graph.node, waiting,
                                                                          strict=True) if s]
        raise ModelLoadError(
            f"{where} is not valid ONNX: its nodes form a cycle",
            context="nodes on or behind the cycle: " + ", ".join(stuck[:_LISTED]),
            hint="a graph must be acyclic; re-export the model",
            reference=Ref.INVALID_MODEL,
        )


def check_domains(model: onnx.ModelProto, *, where: str = "the model") -> None:
    """Refuse ops from domains no later stage can run, naming the nodes that use them.

    Ops that the model defines itself as local functions are fine: they are expanded from their
    bodies.
    """
    local_functions = {(function.domain, function.name) for function in model.functions}
    unknown: dict[str, list[str]] = {}
    for graph_name, node in _all_nodes(model):
        if node.domain in KNOWN_DOMAINS or (node.domain, node.op_type) in local_functions:
            continue
        label = f"{node.name or '(unnamed)'} ({node.op_type})"
        if graph_name:
            label += f" in {graph_name}"
        unknown.setdefault(node.domain, []).append(label)
    if not unknown:
        return
    lines = [
        f"domain '{domain}': {len(nodes)} node(s): {_listing(nodes)}"
        for domain, nodes in sorted(unknown.items())
    ]
    raise ModelLoadError(
        f"{where} uses ops from the unknown domain(s) "
        + ", ".join(f"'{domain}'" for domain in sorted(unknown)),
        context="\n".join(lines),
        hint="edgefuse runs the standard ONNX domains, com.microsoft and edgefuse; replace these "
        "ops before export, or ship their definitions as model-local functions",
        reference=Ref.UNKNOWN_OP_DOMAIN,
    )


def graph_input_names(model: onnx.ModelProto) -> list[str]:
    """The inputs a caller feeds: graph inputs that are not initializers (old IRs list both)."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [value.name for value in model.graph.input if value.name not in initializers]


def check_graph_inputs(model: onnx.ModelProto, *, where: str = "the model") -> list[str]:
    """A graph without inputs computes a constant: nothing to deploy, almost always a bad export."""
    names = graph_input_names(model)
    if not names:
        raise ModelLoadError(
            f"{where} has no graph inputs",
            context=f"{len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers",
            hint="export the model with its inputs as graph inputs (torch.onnx.export with "
            "input_names=...), not as constants baked into the graph",
            reference=Ref.GRAPH_WITHOUT_INPUTS,
        )
    return names


def check_input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], *, where: str = "the model"
) -> None:
    """Every given shape names a real input and fits it; every input ends up fully static.

    Why static: the Ascend compiler builds for fixed shapes, and constant folding and shape
    inference only finish their work when every dimension is known.
    """
    names = graph_input_names(model)
    unknown = [name for name in shapes if name not in names]
    if unknown:
        raise InputError(
            f"--input names {', '.join(repr(n) for n in unknown)}, which {where} does not have",
            context=f"the model's inputs: {', '.join(names)}",
            hint=f"use one of the real names, e.g. --input {names[0]}:...",
            reference=Ref.UNKNOWN_INPUT_NAME,
        )
    values = {value.name: value for value in model.graph.input}
    for name in names:
        dims = _declared_dims(values[name])
        if name in shapes:
            _check_fits(name, dims, shapes[name])
            continue
        if dims is None:
            raise InputError(
                f"input '{name}' has no declared shape",
                hint=f"give its shape: --input {name}:D0,D1,...",
                reference=Ref.DYNAMIC_INPUT_SHAPE,
            )
        dynamic = [(index, dim) for index, dim in enumerate(dims) if not isinstance(dim, int)]
        if dynamic:
            index, dim = dynamic[0]
            which = ", ".join(f"{i} ('{d or '?'}')" for i, d in dynamic)
            example = format_shape([d if isinstance(d, int) else 1 for d in dims])
            raise InputError(
                f"input '{name}' has dynamic dimension(s) {which} and no shape was given",
                context=f"declared shape: [{format_shape([d or '?' for d in dims])}]",
                hint=f"fix the shape for deployment, e.g. --input {name}:{example}",
                reference=Ref.DYNAMIC_INPUT_SHAPE,
            )


def _parse(data: bytes, source: Path) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as exc:
        raise _not_onnx(data, source, str(exc)) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise _not_onnx(data, source, "the message has no IR version or no graph")
    broken = _undecodable_text(model)
    if broken is not None:
        raise _not_onnx(data, source, f"{broken} is not UTF-8 text")
    return model


def _undecodable_text(message: Message) -> str | None:
    """The first string field at any depth of ``message`` that is not UTF-8, or None.

    Why: protobuf hands a proto2 string field that is not UTF-8 (a flipped byte in an op type
    or a name) back as ``bytes`` instead of failing the parse, and every reader of names
    (f-strings, dict keys, the op tables) would then fail far from the cause."""
    for field, value in message.ListFields():
        if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        values = (value,) if isinstance(value, (str, bytes, Message)) else value  # repeated
        for item in values:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                found = _undecodable_text(item)
                if found is not None:
                    return found
            elif not isinstance(item, str):
                return f"{field.containing_type.name}.{field.name} {bytes(item[:40])!r}"
    return None


def _not_onnx(data: bytes, source: Path, detail: str) -> ModelLoadError:
    size = f"{len(data)} bytes"
    if zipfile.is_zipfile(source):
        return ModelLoadError(
            f"'{source}' is a zip archive (a PyTorch file?), not an ONNX model",
            context=size,
            hint="convert it first: edgefuse convert FILE -o model.onnx",
            reference=Ref.NOT_ONNX,
        )
    if data[:1] == b"\x08" and len(data) > 16:
        # ModelProto.ir_version (field 1, varint) comes first in every file onnx writes.
        return ModelLoadError(
            f"'{source}' starts like an ONNX model but cannot be parsed: truncated or corrupted",
            context=f"{size}; protobuf: {detail}",
            hint="copy or download the file again and compare its size with the original",
            reference=Ref.TRUNCATED_MODEL,
        )
    return ModelLoadError(
        f"'{source}' is not an ONNX model",
        context=f"{size}; protobuf: {detail}",
        hint="pass an .onnx file, a TorchScript file, or a 'package.module:factory' callable",
        reference=Ref.NOT_ONNX,
    )


def _load_external_data(model: onnx.ModelProto, source: Path) -> None:
    base = source.parent
    external = [
        tensor for tensor in _all_tensors(model) if external_data_helper.uses_external_data(tensor)
    ]
    for tensor in external:
        info = external_data_helper.ExternalDataInfo(tensor)
        data_file = base / info.location
        if not data_file.is_file():
            raise ModelLoadError(
                f"external data of tensor '{tensor.name}' is missing",
                context=f"looked for '{data_file}' (location '{info.location}' in '{source.name}')",
                hint="keep the external-data file next to the .onnx file, under the name the "
                "model records",
                reference=Ref.MISSING_EXTERNAL_DATA,
            )
        needed = (info.offset or 0) + (info.length or 0)
        if info.length is not None and data_file.stat().st_size < needed:
            raise ModelLoadError(
                f"external data of tensor '{tensor.name}' is truncated",
                context=f"'{data_file}' has {data_file.stat().st_size} bytes, the tensor needs "
                f"bytes up to {needed}",
                hint="copy the external-data file again",
                reference=Ref.MISSING_EXTERNAL_DATA,
            )
    if not external:
        return
    try:
        external_data_helper.load_external_data_for_model(model, str(base))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise ModelLoadError(
            f"cannot read the external data of '{source}'",
            context=str(exc),
            hint="external data must lie in or below the model's directory",
            reference=Ref.MISSING_EXTERNAL_DATA,
        ) from exc


def _declared_dims(value: onnx.ValueInfoProto) -> list[int | str] | None:
    """Declared dims (int for static, the dim_param or '' for dynamic), None when unranked."""
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    return [
        dim.dim_value if dim.HasField("dim_value") else dim.dim_param
        for dim in tensor_type.shape.dim
    ]


def _check_fits(name: str, dims: list[int | str] | None, shape: tuple[int, ...]) -> None:
    if dims is None:
        return
    declared = f"[{format_shape([d or '?' for d in dims])}]"
    if len(dims) != len(shape):
        raise InputError(
            f"input '{name}' has rank {len(dims)}, but the given shape has {len(shape)} dims",
            context=f"declared shape: {declared}, given: [{format_shape(shape)}]",
            hint=f"give {len(dims)} dims: --input {name}:...",
            reference=Ref.BAD_INPUT_SHAPE,
        )
    clashes = [
        f"dim {index}: model {dim}, given {given}"
        for index, (dim, given) in enumerate(zip(dims, shape, strict=True))
        if isinstance(dim, int) and dim != given
    ]
    if clashes:
        raise InputError(
            f"the shape given for input '{name}' contradicts its static dims",
            context=f"declared shape: {declared}; " + "; ".join(clashes),
            hint="only dynamic dims can be chosen; keep the static ones as declared",
            reference=Ref.BAD_INPUT_SHAPE,
        )


def _all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Initializers of every graph and tensors held in node attributes (Constant values)."""
    yield from model.graph.initializer
    for _, node in _all_nodes(model):
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            subgraphs = [*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])]
            for subgraph in subgraphs:
                yield from subgraph.initializer


def _all_nodes(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.NodeProto]]:
    """Every node: main graph, subgraphs (If/Loop/Scan bodies) and local function bodies."""
    yield from _graph_nodes(model.graph, "")
    for function in model.functions:
        for node in function.node:
            yield from _node_and_subgraphs(node, f"function {function.name}")


def _graph_nodes(graph: onnx.GraphProto, graph_name: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    for node in graph.node:
        yield from _node_and_subgraphs(node, graph_name)


def _node_and_subgraphs(
    node: onnx.NodeProto, graph_name: str
) -> Iterator[tuple[str, onnx.NodeProto]]:
    yield graph_name, node
    for attribute in node.attribute:
        subgraphs = list(attribute.graphs)
        if attribute.HasField("g"):
            subgraphs.append(attribute.g)
        for subgraph in subgraphs:
            label = f"subgraph '{attribute.name}' of {node.name or node.op_type}"
            yield from _graph_nodes(subgraph, label)


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown if len(items) <= _LISTED else f"{shown}, … ({len(items) - _LISTED} more)"
