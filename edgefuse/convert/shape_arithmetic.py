"""Shape computations on a dynamic batch become constants that still follow the batch.

Why: a model exported with a dynamic batch (PyTorch ``dynamic_axes`` or ``dynamic_shapes``,
paddle2onnx) computes the shapes it reshapes to at run time: ``Shape -> Gather/Slice ->
Unsqueeze -> Concat -> Reshape``, because one of the dimensions (the batch) is not known when the
file is written. Constant folding
cannot touch those chains (``Shape`` of a tensor with a symbolic dimension is not a constant), so
a YOLO head keeps a dozen shape nodes per scale and ATC sees a Reshape it cannot size. onnxslim
folds them; so does this pass:

- a value computed only from static dimensions (``Gather(Shape(x), 2)`` where dimension 2 of
  ``x`` is 80) becomes a constant, even though ``Shape(x)`` as a whole is not;
- a Reshape's shape whose entries are static, or copy a dimension of the reshaped tensor at the
  same position (``view(x.size(0), ...)``: entry 0 is dimension 0 of ``x``), becomes a constant
  with 0 in those entries (Reshape's "copy this dimension"); one entry that is neither becomes -1
  when the shape has no -1 yet. The dynamo exporter writes its Reshapes with ``allowzero=1``
  (0 is a zero-sized dimension there); a folded one gets ``allowzero=0``, which computes the same
  since no entry is a static 0, and spells ``x.size(0)`` as ``Reshape(Squeeze(Shape(x)[0:1]),
  [-1])``, which the evaluator reads as the dimension;
- a Resize to ``sizes`` whose entries copy the input's dimension where they are not static
  (``F.interpolate(x, size=(64, 64))``: ``Concat(Shape(x)[0:2], [64, 64])``) resizes by the
  equivalent ``scales`` instead (1 where the dimension is copied), when each scale is exact.

A dimension is "the same" when it is the same axis of the same value, or both are the same named
symbolic dimension after ONNX shape inference (Transpose and Conv keep ``batch`` named). Anything
the evaluator does not understand leaves the chain untouched.

Why in convert: it runs twice. ``convert`` runs it while the batch is still symbolic, before it
fixes the input shape the user gave (``--input x:1,3,640,640`` on a ``dynamic=True`` export): once
the batch is 1, constant folding would bake that 1 into every Reshape and Resize and the model
could never be compiled with batch gears again (``error[gear-shape-fails]``). The optimizer runs
it as its ``fold-shape-arithmetic`` pass on models that reach it with a dynamic batch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as ir_passes

_INT_TYPES = (ir.DataType.INT64, ir.DataType.INT32)
_MAX_ELEMENTS = 64  # shape tensors are short; a bigger integer tensor is data, not a shape


@dataclasses.dataclass(frozen=True)
class _Symbol:
    """A dimension known only at run time: axis ``axis`` of ``value`` (named ``name``, if any)."""

    value: ir.Value
    axis: int
    name: str | None


_Dim = int | _Symbol
_Entries = tuple[tuple[_Dim, ...], bool]  # (dims, is a scalar)


def fold_shape_arithmetic(model: ir.Model) -> bool:
    """Fold the shape chains of ``model`` in place; whether anything changed."""
    graph = model.graph
    evaluator = _Evaluator()
    modified = False
    for node in list(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Reshape" and len(node.inputs) == 2:
            modified |= _fold_reshape_shape(graph, node, evaluator)
        if node.op_type == "Resize" and len(node.inputs) == 4:
            modified |= _resize_sizes_to_scales(graph, node, evaluator)
        for output in node.outputs:
            modified |= _fold_static(graph, output, evaluator)
    if modified:
        _reinfer_shapes(model)
    return modified


def _reinfer_shapes(model: ir.Model) -> None:
    """Infer every intermediate shape afresh from the now constant shapes.

    Why afresh: a Reshape whose shape was computed at run time got an invented dimension name
    (``unk__0``) from the first inference; merged with a new inference, the stale name would stay
    and hide that the dimension is the batch again, so the next Reshape down the graph would not
    fold.
    """
    outputs = set(model.graph.outputs)
    for node in model.graph:
        for value in node.outputs:
            if value not in outputs:
                value.shape = None
    ir_passes.ShapeInferencePass(strict_mode=False)(model)


def _fold_static(graph: ir.Graph, value: ir.Value, evaluator: _Evaluator) -> bool:
    """Replace an integer value all of whose entries are static by a constant."""
    producer = value.producer()
    if (producer is None or producer.op_type in ("Constant", "Shape") or value.const_value
            is not None or value.is_graph_output() or not value.uses()):
        return False
    entries = evaluator.entries(value)
    if entries is None or not all(isinstance(d, int) for d in entries[0]):
        return False
    dims, scalar = entries
    array = np.array(dims[0] if scalar else dims, dtype=value.dtype.numpy())
    value.replace_all_uses_with(_constant(graph, value.name, array))
    return True


def _fold_reshape_shape(graph: ir.Graph, node: ir.Node, evaluator: _Evaluator) -> bool:
    data, shape = node.inputs
    if data is None or shape is None or shape.const_value is not None:
        return False
    entries = evaluator.entries(shape)
    if entries is None or entries[1]:
        return False
    target: list[int] = []
    unresolved = []
    for position, dim in enumerate(entries[0]):
        if isinstance(dim, int):
            if dim == 0:
                return False  # a static zero-sized dimension: 0 would mean "copy"
            target.append(dim)
        elif _same_dimension(data, position, dim):
            target.append(0)
        else:
            unresolved.append(position)
            target.append(-1)
    if len(unresolved) > 1 or (unresolved and target.count(-1) > 1):
        return False
    if node.attributes.get_int("allowzero", 0):
        # the dynamo exporter's Reshapes say allowzero=1, where 0 is a zero-sized dimension; no
        # entry is a static 0 (refused above), so with allowzero=0 the 0s copy and nothing else
        # changes: an entry that copies a dimension of 0 is 0 either way
        node.attributes["allowzero"] = ir.AttrInt64("allowzero", 0)
    node.replace_input_with(1, _constant(graph, shape.name, np.array(target, dtype=np.int64)))
    return True


def _resize_sizes_to_scales(graph: ir.Graph, node: ir.Node, evaluator: _Evaluator) -> bool:
    """``Resize(x, sizes=[N, C, 64, 64])`` with N and C copied from ``x`` becomes
    ``Resize(x, scales=[1, 1, 4, 4])``: the same output and sampling, for any batch.

    Only where each scale is exact: ONNX Runtime derives a Resize's scale from ``sizes`` as
    float32 ``size / dim`` and its output size from ``scales`` as ``floor(dim * scale)``; both
    must give back the sizes, or the rewrite would move the sampling grid.
    """
    data, _, scales, sizes = node.inputs
    if (data is None or sizes is None or sizes.const_value is not None or scales is not None
            or data.shape is None or "axes" in node.attributes
            or node.attributes.get_string("keep_aspect_ratio_policy", "stretch") != "stretch"):
        return False
    entries = evaluator.entries(sizes)
    if entries is None or entries[1] or len(entries[0]) != data.shape.rank():
        return False
    factors = []
    for position, size in enumerate(entries[0]):
        dim = data.shape[position]
        if isinstance(size, _Symbol) and _same_dimension(data, position, size):
            factors.append(np.float32(1))
        elif isinstance(size, int) and isinstance(dim, int) and dim > 0:
            factor = np.float32(size) / np.float32(dim)
            if int(np.floor(np.float32(dim) * factor)) != size or int(np.floor(dim * float(
                    factor))) != size:
                return False
            factors.append(factor)
        else:
            return False
    node.resize_inputs(3)
    node.replace_input_with(2, _constant(graph, sizes.name, np.array(factors, np.float32)))
    return True


def _same_dimension(data: ir.Value, position: int, symbol: _Symbol) -> bool:
    """Whether dimension ``position`` of ``data`` is provably the run-time dimension ``symbol``."""
    if symbol.value is data and symbol.axis == position:
        return True
    shape = data.shape
    if shape is None or position >= shape.rank() or symbol.name is None:
        return False
    dim = shape[position]
    return isinstance(dim, ir.SymbolicDim) and dim.value == symbol.name


def _constant(graph: ir.Graph, base: str | None, array: np.ndarray) -> ir.Value:
    name, counter = f"{base or 'shape'}.folded", 1
    while name in graph.initializers:
        counter += 1
        name = f"{base or 'shape'}.folded{counter}"
    value = ir.Value(name=name, shape=ir.Shape(array.shape),
                     type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                     const_value=ir.tensor(array, name=name))
    graph.register_initializer(value)
    return value


class _Evaluator:
    """Entries of small integer tensors, as static ints or run-time dimensions, memoised."""

    def __init__(self) -> None:
        self._memo: dict[int, _Entries | None] = {}

    def entries(self, value: ir.Value | None) -> _Entries | None:
        if value is None:
            return None
        key = id(value)
        if key not in self._memo:
            self._memo[key] = None  # guards against revisiting during evaluation
            self._memo[key] = self._evaluate(value)
        return self._memo[key]

    def _evaluate(self, value: ir.Value) -> _Entries | None:
        const = value.const_value
        if const is not None:
            array = const.numpy()
            if array.dtype.kind not in "iu" or array.ndim > 1 or array.size > _MAX_ELEMENTS:
                return None
            return tuple(int(v) for v in array.reshape(-1)), array.ndim == 0
        node = value.producer()
        if node is None or node.domain not in ("", "ai.onnx") or value.dtype not in _INT_TYPES:
            return None
        handler = getattr(self, f"_{node.op_type.lower()}", None)
        return handler(node) if handler is not None else None

    def _shape(self, node: ir.Node) -> _Entries | None:
        source = node.inputs[0]
        if source is None or source.shape is None:
            return None
        rank = source.shape.rank()
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", rank)
        axes = range(rank)[slice(start, end)]
        dims = []
        for axis in axes:
            dim = source.shape[axis]
            if isinstance(dim, int):
                dims.append(dim)
            else:
                dims.append(_Symbol(source, axis, dim.value if isinstance(dim.value, str)
                                    else None))
        return tuple(dims), False

    def _gather(self, node: ir.Node) -> _Entries | None:
        data, indices = (self.entries(v) for v in node.inputs[:2])
        if data is None or indices is None or data[1] or node.attributes.get_int("axis", 0):
            return None
        picked = []
        for index in indices[0]:
            if not isinstance(index, int) or not -len(data[0]) <= index < len(data[0]):
                return None
            picked.append(data[0][index])
        return tuple(picked), indices[1]

    def _slice(self, node: ir.Node) -> _Entries | None:
        if len(node.inputs) < 3:  # opset < 10 spells starts/ends as attributes
            return None
        data = self.entries(node.inputs[0])
        bounds = [self.entries(v) if v is not None else None for v in node.inputs[1:5]]
        if data is None or data[1] or bounds[0] is None or bounds[1] is None:
            return None
        starts, ends = bounds[0][0], bounds[1][0]
        axes = bounds[2][0] if len(bounds) > 2 and bounds[2] is not None else (0,)
        steps = bounds[3][0] if len(bounds) > 3 and bounds[3] is not None else (1,)
        values = [*starts, *ends, *axes, *steps]
        if len(starts) != 1 or tuple(axes) not in ((0,), (-1,)) or not all(
                isinstance(v, int) for v in values):
            return None
        return tuple(data[0][slice(starts[0], ends[0], steps[0])]), False

    def _unsqueeze(self, node: ir.Node) -> _Entries | None:
        data = self.entries(node.inputs[0])
        return (data[0], False) if data is not None and data[1] else None

    def _squeeze(self, node: ir.Node) -> _Entries | None:
        data = self.entries(node.inputs[0])
        return (data[0], True) if data is not None and len(data[0]) == 1 and not data[1] else None

    def _concat(self, node: ir.Node) -> _Entries | None:
        parts = [self.entries(v) for v in node.inputs]
        if any(p is None or p[1] for p in parts):
            return None
        return tuple(d for part in parts for d in part[0]), False

    def _reshape(self, node: ir.Node) -> _Entries | None:
        """A shape entry reshaped to a vector: the dynamo exporter's ``unsqueeze`` of a
        ``sym_size`` (``Reshape(Squeeze(Shape(x)[0:1]), [-1])``)."""
        data, target = (self.entries(v) for v in node.inputs[:2])
        if data is None or target is None or len(target[0]) != 1 or target[0][0] not in (
                -1, len(data[0])):
            return None
        return data[0], False

    def _cast(self, node: ir.Node) -> _Entries | None:
        return self.entries(node.inputs[0])

    def _identity(self, node: ir.Node) -> _Entries | None:
        return self.entries(node.inputs[0])

    def _arithmetic(self, node: ir.Node, operation) -> _Entries | None:
        left, right = (self.entries(v) for v in node.inputs[:2])
        if left is None or right is None:
            return None
        a, b = left[0], right[0]
        if not all(isinstance(v, int) for v in (*a, *b)) or (len(a) != len(b) and
                                                            1 not in (len(a), len(b))):
            return None
        length = max(len(a), len(b))
        a, b = (a * length if len(a) == 1 else a), (b * length if len(b) == 1 else b)
        results = tuple(operation(x, y) for x, y in zip(a, b, strict=True))
        return None if None in results else (results, left[1] and right[1])

    def _mul(self, node: ir.Node) -> _Entries | None:
        return self._arithmetic(node, lambda x, y: x * y)

    def _add(self, node: ir.Node) -> _Entries | None:
        return self._arithmetic(node, lambda x, y: x + y)

    def _sub(self, node: ir.Node) -> _Entries | None:
        return self._arithmetic(node, lambda x, y: x - y)

    def _div(self, node: ir.Node) -> _Entries | None:  # integer Div truncates toward zero
        return self._arithmetic(node, lambda x, y: int(x / y) if y else None)
