"""OpSpec: the one declaration an edgefuse custom operator is made of.

Why one declaration: an operator lives in six places at once (the ONNX node and its schema, the
host decomposition that lets ONNX Runtime run it, the numpy reference ``verify`` compares against,
and on the Ascend side the op-info ``.ini``, the ``REG_OP`` prototype and the ONNX parser plugin).
Written separately they drift; here the names, dtypes, formats and attributes are written once and
everything else is derived from or checked against them (see ``edgefuse/acl/ops/__init__.py``).

Conventions shared by every op:

- ONNX side: op type ``name`` in domain ``edgefuse`` version 1; the decomposition is an ONNX
  function in default-domain opset ``FUNCTION_OPSET`` whose nodes are written in ONNX's textual
  syntax (``onnx.parser``), the form ONNX itself uses for its function bodies.
- Ascend side: the ``REG_OP`` type is ``ascend_type`` (``Edgefuse`` + name, so it can neither
  clash with nor shadow CANN's built-in ``Swish`` or ``DepthwiseConv2D``); the kernel file and
  function follow TBE's naming rule, OpType ``AbcDef`` -> ``abc_def.py`` / ``abc_def()``.
- Device variants: every tensor lists one dtype and one format per kernel variant ("column"), the
  way the op-info ``.ini`` does; the columns of all tensors line up.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.defs
import onnx.helper
import onnx.parser
import onnx.shape_inference

from edgefuse.errors import InputError, Ref

DOMAIN = "edgefuse"
DOMAIN_VERSION = 1
FUNCTION_OPSET = 18  # default-domain opset the decompositions are written in

# ONNX type strings <-> numpy dtypes <-> the device dtype names of the op-info .ini.
ONNX_TYPES = {
    "tensor(float16)": np.dtype("float16"),
    "tensor(float)": np.dtype("float32"),
    "tensor(int32)": np.dtype("int32"),
    "tensor(int64)": np.dtype("int64"),
}
DEVICE_DTYPES = {"float16": "tensor(float16)", "float32": "tensor(float)", "int32": "tensor(int32)"}

# A dimension is an int, a symbolic name, or None (unknown).
Dim = int | str | None
Shape = tuple[Dim, ...]


@dataclasses.dataclass(frozen=True)
class OpTensor:
    """An input or output: its ONNX type and, per kernel variant, the device dtype and format."""

    name: str
    doc: str
    onnx_type: str  # a type parameter of the op ("T") or a fixed type ("tensor(int32)")
    device_dtypes: tuple[str, ...]  # one per kernel variant: "float16" | "float32" | "int32"
    device_formats: tuple[str, ...]  # one per kernel variant: "ND" | "NCHW" | "NC1HWC0" | ...
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class AttrSpec:
    """An attribute; ``default=None`` makes it required."""

    name: str
    type: str  # "float" | "int" | "ints"
    doc: str
    default: float | int | tuple[int, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default is None


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything about one custom operator; see the module docstring for the conventions."""

    name: str
    doc: str
    package: str  # the op's folder as a package, e.g. "edgefuse.acl.ops.swish"
    inputs: tuple[OpTensor, ...]
    outputs: tuple[OpTensor, ...]
    attributes: tuple[AttrSpec, ...]
    type_constraints: tuple[tuple[str, tuple[str, ...]], ...]  # ("T", ("tensor(float)", ...))
    # (input shapes, resolved attributes) -> output shapes; raises InputError on a bad combination
    shape_function: Callable[[Sequence[Shape | None], Mapping[str, Any]], list[Shape]]
    # resolved attributes -> None; raises InputError naming the bad value
    check_attributes: Callable[[Mapping[str, Any]], None]
    # (input arrays, None for an absent optional input; resolved attributes) -> outputs
    reference_function: Callable[[Sequence[np.ndarray | None], Mapping[str, Any]], list]
    function_body: str  # the decomposition's nodes, ONNX textual syntax
    ascend_type: str  # REG_OP name
    infer_shape_cpp: str  # body of the op proto's InferShape function (C++)
    verify_cpp: str  # body of the op proto's verifier (C++)
    version: int = DOMAIN_VERSION
    # op-info folders (``Soc.short_name``) whose chips have every instruction the kernel uses;
    # None: all of them. ``unsupported_reason`` says what the others lack, with the source.
    soc_families: tuple[str, ...] | None = None
    unsupported_reason: str = ""

    def __post_init__(self) -> None:
        columns = {len(t.device_dtypes) for t in self.tensors} | {
            len(t.device_formats) for t in self.tensors
        }
        if len(columns) != 1:
            raise ValueError(f"{self.name}: device dtype/format columns do not line up")

    # ---- naming ------------------------------------------------------------------------------

    @property
    def tensors(self) -> tuple[OpTensor, ...]:
        return self.inputs + self.outputs

    @property
    def kernel_name(self) -> str:
        """TBE's name rule for ``ascend_type``: ``EdgefuseSwish`` -> ``edgefuse_swish``."""
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", self.ascend_type).lower()

    @property
    def kernel_path(self) -> str:
        """Where the hand-written kernel lives, relative to the op's folder."""
        return f"tbe/impl/{self.kernel_name}.py"

    def kernel_source(self) -> str:
        return (importlib.resources.files(self.package) / self.kernel_path).read_text("utf-8")

    def origin_op_types(self, opsets: Sequence[int] = range(8, 19)) -> tuple[str, ...]:
        """The ``<domain>::<opset>::<OpType>`` keys the ONNX parser plugin registers.

        ``edgefuse::1::Name`` for models that keep the domain, and the default-domain spellings
        for models whose custom nodes were moved to the default domain because ATC's parser wants
        a single ``opset_import`` entry when nodes leave their domain empty (E16005).
        """
        own = f"{DOMAIN}::{self.version}::{self.name}"
        return (own, *(f"ai.onnx::{opset}::{self.name}" for opset in opsets))

    def runs_on(self, soc_family: str) -> bool:
        """Whether the kernel can be built for chips of ``soc_family`` (e.g. ``ascend310b``)."""
        return self.soc_families is None or soc_family in self.soc_families

    # ---- attributes --------------------------------------------------------------------------

    def resolve_attributes(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults filled in, types checked, values checked: the attributes every consumer sees."""
        known = {a.name: a for a in self.attributes}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise InputError(
                f"{self.name} has no attribute {', '.join(unknown)}",
                hint=f"its attributes: {', '.join(known)}",
                reference=Ref.BAD_OP_ATTRIBUTE,
            )
        resolved: dict[str, Any] = {}
        for attr in self.attributes:
            if attr.name not in given and attr.required:
                raise InputError(
                    f"{self.name} needs the attribute '{attr.name}' ({attr.doc})",
                    reference=Ref.BAD_OP_ATTRIBUTE,
                )
            value = given.get(attr.name, attr.default)
            resolved[attr.name] = _coerce(self.name, attr, value)
        self.check_attributes(resolved)
        return resolved

    # ---- the three executable views of the op -------------------------------------------------

    def reference(self, inputs: Sequence[np.ndarray | None], **attributes: Any) -> list:
        """The numpy reference: what the op means, written for clarity rather than speed."""
        return self.reference_function(list(inputs), self.resolve_attributes(attributes))

    def infer_shapes(self, shapes: Sequence[Shape | None], **attributes: Any) -> list[Shape]:
        return self.shape_function(list(shapes), self.resolve_attributes(attributes))

    def function_proto(self, opset: int = FUNCTION_OPSET) -> onnx.FunctionProto:
        """The decomposition into default-domain ONNX ops, as a model-local function.

        ``opset`` is the default-domain version the function imports; it must equal the model's
        (ONNX requires it), and the bodies are valid from ``FUNCTION_OPSET`` on.
        """
        if opset < FUNCTION_OPSET:
            raise ValueError(f"the decompositions need opset >= {FUNCTION_OPSET}, got {opset}")
        return onnx.parser.parse_function(self.function_text(opset))

    def function_text(self, opset: int = FUNCTION_OPSET) -> str:
        attrs = ", ".join(_attribute_signature(a) for a in self.attributes)
        inputs = ", ".join(t.name for t in self.inputs)
        outputs = ", ".join(t.name for t in self.outputs)
        header = (
            f'<domain: "{DOMAIN}", opset_import: ["": {opset}, "{DOMAIN}": '
            f"{self.version}]>\n{self.name} <{attrs}> ({inputs}) => ({outputs})"
        )
        return f"{header}\n{{\n{self.function_body.strip()}\n}}\n"

    def make_node(self, inputs: Sequence[str], outputs: Sequence[str], **attributes: Any):
        """A node of this op with every attribute written out, defaults included.

        Why explicit defaults: ``onnx.inliner`` does not substitute a function's default
        attribute values (it leaves ``Constant ()`` behind), so a node that omits one would
        only run where the inliner in use happens to.
        """
        resolved = self.resolve_attributes(attributes)
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in resolved.items()}
        return onnx.helper.make_node(
            self.name, list(inputs), list(outputs), domain=DOMAIN, **values
        )

    # ---- ONNX schema -------------------------------------------------------------------------

    def onnx_schema(self) -> onnx.defs.OpSchema:
        """The schema ONNX's checker and shape inference use for nodes of this op."""
        single, optional = (
            onnx.defs.OpSchema.FormalParameterOption.Single,
            onnx.defs.OpSchema.FormalParameterOption.Optional,
        )
        schema = onnx.defs.OpSchema(
            self.name,
            DOMAIN,
            self.version,
            self.doc,
            inputs=[
                onnx.defs.OpSchema.FormalParameter(
                    t.name, t.onnx_type, t.doc, param_option=optional if t.optional else single
                )
                for t in self.inputs
            ],
            outputs=[
                onnx.defs.OpSchema.FormalParameter(t.name, t.onnx_type, t.doc)
                for t in self.outputs
            ],
            type_constraints=[(name, list(types), "") for name, types in self.type_constraints],
            attributes=[_schema_attribute(a) for a in self.attributes],
        )
        schema.set_type_and_shape_inference_function(self._infer_onnx)
        return schema

    def _infer_onnx(self, ctx) -> None:
        shapes: list[Shape | None] = []
        types: list[int | None] = []
        for index in range(ctx.get_num_inputs()):
            type_proto = ctx.get_input_type(index) if ctx.has_input(index) else None
            if type_proto is None or not type_proto.HasField("tensor_type"):
                shapes.append(None)
                types.append(None)
                continue
            tensor = type_proto.tensor_type
            types.append(tensor.elem_type)
            shapes.append(_shape_of(tensor) if tensor.HasField("shape") else None)
        given = {}
        for attr in self.attributes:
            proto = ctx.get_attribute(attr.name)
            if proto is not None:
                given[attr.name] = onnx.helper.get_attribute_value(proto)
        try:
            out_shapes = self.infer_shapes(shapes, **given)
        except InputError as exc:
            raise onnx.shape_inference.InferenceError(f"[{self.name}] {exc.message}") from exc
        for index, (spec, shape) in enumerate(zip(self.outputs, out_shapes, strict=True)):
            elem_type = self._output_elem_type(spec, types)
            if elem_type is None:
                continue
            ctx.set_output_type(index, onnx.helper.make_tensor_type_proto(elem_type, shape))

    def _output_elem_type(self, output: OpTensor, input_types: list[int | None]) -> int | None:
        if output.onnx_type in ONNX_TYPES:
            return onnx.helper.np_dtype_to_tensor_dtype(ONNX_TYPES[output.onnx_type])
        for spec, elem_type in zip(self.inputs, input_types, strict=False):
            if spec.onnx_type == output.onnx_type:
                return elem_type
        return None


def register_onnx_schemas(specs: Sequence[OpSpec]) -> None:
    """Make ONNX's checker and shape inference know the ops (idempotent, process-wide).

    Why explicit and not at import: registration changes global ONNX state; the code paths that
    put edgefuse nodes into a model (the optimizer rules, ``attach_functions``) call this.
    """
    for spec in specs:
        if not onnx.defs.has(spec.name, DOMAIN):
            onnx.defs.register_schema(spec.onnx_schema())


# ---- helpers ---------------------------------------------------------------------------------


def _coerce(op: str, attr: AttrSpec, value: Any) -> Any:
    integral = (int, np.integer)
    if attr.type == "ints" and isinstance(value, (list, tuple)):
        if all(isinstance(v, integral) and not isinstance(v, bool) for v in value):
            return tuple(int(v) for v in value)
    elif attr.type == "float" and isinstance(value, (float, np.floating, *integral)):
        if not isinstance(value, bool):
            return float(value)
    elif attr.type == "int" and isinstance(value, integral) and not isinstance(value, bool):
        return int(value)
    raise InputError(
        f"{op} attribute '{attr.name}' must be {attr.type}, got {value!r}",
        reference=Ref.BAD_OP_ATTRIBUTE,
    )


def _attribute_signature(attr: AttrSpec) -> str:
    if attr.required:
        return attr.name
    if attr.type == "ints":
        return f"{attr.name}: ints = [{', '.join(str(v) for v in attr.default)}]"
    if attr.type == "float":
        return f"{attr.name}: float = {float(attr.default)!r}"
    return f"{attr.name}: int = {int(attr.default)}"


def _schema_attribute(attr: AttrSpec) -> onnx.defs.OpSchema.Attribute:
    types = {
        "float": onnx.defs.OpSchema.AttrType.FLOAT,
        "int": onnx.defs.OpSchema.AttrType.INT,
        "ints": onnx.defs.OpSchema.AttrType.INTS,
    }
    if attr.required:
        return onnx.defs.OpSchema.Attribute(attr.name, types[attr.type], attr.doc, required=True)
    default = list(attr.default) if attr.type == "ints" else attr.default
    return onnx.defs.OpSchema.Attribute(
        attr.name, onnx.helper.make_attribute(attr.name, default), attr.doc
    )


def _shape_of(tensor: onnx.TypeProto.Tensor) -> Shape:
    dims: list[Dim] = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def require_rank(op: str, name: str, shape: Shape | None, rank: int) -> Shape | None:
    """``shape`` when it has ``rank`` dimensions (or is unknown); an InputError otherwise."""
    if shape is not None and len(shape) != rank:
        raise InputError(
            f"{op} input '{name}' must have rank {rank}, got shape {list(shape)}",
            reference=Ref.BAD_OP_INPUT,
        )
    return shape


def require(condition: bool, op: str, message: str) -> None:
    """Raise the InputError every op uses for an attribute or shape it cannot take."""
    if not condition:
        raise InputError(f"{op}: {message}", reference=Ref.BAD_OP_ATTRIBUTE)
