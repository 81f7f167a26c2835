"""The default policy: which nodes stay FP32 in an FP16 model, as data with the reasons.

Why a fixed, documented policy before any search: some ops are wrong in FP16 on inputs the
calibration set never shows. FP16 has an 11-bit significand and a largest finite value of 65504,
so integers are exact only up to 2048, a coordinate above 1024 moves in steps of 1 or more, a sum
of a few thousand activations can pass 65504, and ``exp(x)`` overflows for ``x > 11.09``. A search
on a handful of calibration images cannot prove these safe; the policy keeps them FP32 up front,
and the report names the rule (``edgefuse quantize --show-policy`` prints this table).

Each rule is ``PolicyRule(id, applies_to, reason, when)``; ``policy_decisions`` returns, per node
name, the rule that keeps it and the node-specific detail. Inputs that stay FP32 inside an FP16
node (Resize's coordinates) are in ``PINNED_FP32_INPUTS``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from edgefuse.optimize.rule import constant_array
from edgefuse.quantize._slots import fp16_slots, is_float_node

FP16_MAX = 65504.0
# exp(x) for x above this overflows FP16.
EXP_LIMIT = math.log(FP16_MAX)
# Reduced element counts above which a reduction stays FP32.
SUM_LIMIT = 1024
MEAN_LIMIT = 4096


@dataclasses.dataclass(frozen=True)
class PolicyRule:
    id: str
    applies_to: str
    reason: str
    when: str


@dataclasses.dataclass(frozen=True)
class Decision:
    """One node kept FP32: the rule or cause that keeps it, and what in the node triggered it."""

    node: str
    op_type: str
    rule: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


POLICY: tuple[PolicyRule, ...] = (
    PolicyRule(
        "fp16-not-expressible",
        "any op",
        "ONNX cannot express the node in FP16: its schema lists no float16 for a float output, the "
        "output dtype comes from an attribute (ConstantOfShape, RandomNormal), it holds subgraphs "
        "(If, Loop) or its op has no ONNX schema (custom domains).",
        "always",
    ),
    PolicyRule(
        "index-op",
        "Range, TopK, NonMaxSuppression, RoiAlign, MaxRoiPool, CumSum",
        "Their float inputs are counts, coordinates or scores whose exact value decides which "
        "elements are selected: FP16 integers are exact only up to 2048, boxes above 1024 px move "
        "in whole-pixel steps, and near-equal scores tie and reorder.",
        "always",
    ),
    PolicyRule(
        "shape-arithmetic",
        "float ops on values derived from Shape or integer casts",
        "Shape and index arithmetic done in float (sizes, grid coordinates) must stay exact; FP16 "
        "rounds integers above 2048.",
        "every non-constant float input derives from an integer tensor",
    ),
    PolicyRule(
        "normalization-statistics",
        "LayerNormalization, GroupNormalization, InstanceNormalization, LpNormalization, "
        "MeanVarianceNormalization",
        "Mean and variance over whole feature maps: the sum of squares overflows FP16 or loses "
        "the low bits long before the result does.",
        "always",
    ),
    PolicyRule(
        "large-reduction",
        "ReduceSum, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSumExp, ReduceProd; ReduceMean, "
        "GlobalAveragePool, AveragePool",
        "A sum grows with its count (1024 values of 64 already exceed 65504) and an FP16 running "
        "sum stops absorbing addends below its step; a mean stays in range, but over very many "
        "elements its accumulation on the device is not what the host emulates.",
        f"sums over more than {SUM_LIMIT} elements, means over more than {MEAN_LIMIT}, products "
        "always, or the count is unknown",
    ),
    PolicyRule(
        "unbounded-exp",
        "Exp",
        f"exp(x) overflows FP16 for x > {EXP_LIMIT:.2f}; unless the input is provably bounded "
        "(it comes from Sigmoid, Tanh, Clip, ... through scalar affine ops) other inputs than the "
        "calibration set's may overflow.",
        f"the input's static upper bound is unknown or above {EXP_LIMIT:.2f}",
    ),
    PolicyRule(
        "unbounded-pow",
        "Pow",
        "x**p overflows FP16 for large |x| when p > 1 and for small |x| when p < 0.",
        "the exponent is not constant, or the static bound of |x|**p is unknown or above 65504",
    ),
)

# Inputs that stay float32 inside an otherwise FP16 node: (op type) -> {input index: why}.
PINNED_FP32_INPUTS: dict[str, dict[int, str]] = {
    "Resize": {
        1: "roi: normalised crop coordinates",
        2: "scales: FP16 rounding changes the output size (ONNX Runtime rejects FP16 scales)",
    },
}

_INDEX_OPS = frozenset({"Range", "TopK", "NonMaxSuppression", "RoiAlign", "MaxRoiPool", "CumSum"})
_NORMALIZATIONS = frozenset({
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "LpNormalization",
    "MeanVarianceNormalization",
})
_SUMS = frozenset({"ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp"})
_MEANS = frozenset({"ReduceMean", "GlobalAveragePool", "AveragePool"})


def render_policy() -> str:
    """The policy as the text ``edgefuse quantize --show-policy`` prints."""
    lines = []
    for rule in POLICY:
        lines += [f"{rule.id}", f"  ops:    {rule.applies_to}", f"  when:   {rule.when}",
                  f"  why:    {rule.reason}", ""]
    lines.append("FP32 inputs inside FP16 nodes:")
    for op_type, pins in PINNED_FP32_INPUTS.items():
        for index, why in pins.items():
            lines.append(f"  {op_type} input {index}: {why}")
    return "\n".join(lines)


def policy_decisions(model: ir.Model) -> dict[str, Decision]:
    """Nodes of ``model`` (by name) that the default policy keeps FP32, with the rule and detail.

    Node names must be unique and non-empty (``quantize`` names unnamed nodes first).
    """
    opset = model.opset_imports.get("", 17)
    bounds = value_bounds(model.graph)
    index_like = _index_like_values(model.graph)
    decisions: dict[str, Decision] = {}
    for node in model.graph:
        if not is_float_node(node):
            continue
        found = _decide(node, opset, bounds, index_like)
        if found is not None:
            rule, detail = found
            decisions[node.name] = Decision(node.name, node.op_type, rule, detail)
    return decisions


def _decide(node, opset, bounds, index_like) -> tuple[str, str] | None:
    op = node.op_type
    blocked = fp16_slots(node, opset).blocked
    if blocked is not None:
        return "fp16-not-expressible", blocked
    if node.domain not in ("", "ai.onnx"):
        return None
    if op in _INDEX_OPS:
        return "index-op", f"{op} selects by value"
    if op in _NORMALIZATIONS:
        return "normalization-statistics", f"{op} computes statistics over its normalized axes"
    if op in _SUMS or op == "ReduceProd" or op in _MEANS:
        return _reduction_decision(node, opset)
    if op == "Exp":
        bound = bounds.get(node.inputs[0])
        if bound is None or bound[1] > EXP_LIMIT:
            upper = "unknown" if bound is None else f"{bound[1]:.4g}"
            return "unbounded-exp", f"upper bound of the input: {upper}"
        return None
    if op == "Pow":
        return _pow_decision(node, bounds)
    float_inputs = [v for v in node.inputs if _is_float(v) and constant_array(v) is None]
    if float_inputs and all(v in index_like for v in float_inputs):
        return "shape-arithmetic", "its float inputs derive from integer tensors"
    if op == "Cast" and node.outputs[0] in index_like and node.outputs[0].dtype.is_floating_point():
        return "shape-arithmetic", "casts an integer tensor to float"
    return None


def _reduction_decision(node: ir.Node, opset: int) -> tuple[str, str] | None:
    op = node.op_type
    if op == "ReduceProd":
        return "large-reduction", "a product over- or underflows FP16 within a few factors"
    count = reduced_count(node, opset)
    limit = MEAN_LIMIT if op in _MEANS else SUM_LIMIT
    if count is None:
        return "large-reduction", "the number of reduced elements is unknown"
    if count > limit:
        return "large-reduction", f"reduces {count} elements (limit {limit})"
    return None


def _pow_decision(node: ir.Node, bounds) -> tuple[str, str] | None:
    exponent = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    if exponent is None or exponent.size == 0:
        return "unbounded-pow", "the exponent is not constant"
    e_lo, e_hi = float(np.min(exponent)), float(np.max(exponent))
    if 0.0 <= e_lo and e_hi <= 1.0:
        return None  # |x|**p <= max(1, |x|): stays in range for every FP16 x
    base = bounds.get(node.inputs[0])
    if base is None:
        return "unbounded-pow", f"exponent {e_hi:g} on an input with no static bound"
    top = _pow_bound(base, e_lo, e_hi)
    if top is None or top > FP16_MAX:
        shown = "unbounded" if top is None else f"{top:.4g}"
        return "unbounded-pow", f"|x|**p can reach {shown}"
    return None


def _pow_bound(base: tuple[float, float], e_lo: float, e_hi: float) -> float | None:
    magnitude_hi = max(abs(base[0]), abs(base[1]))
    crosses_zero = base[0] <= 0.0 <= base[1]
    magnitude_lo = 0.0 if crosses_zero else min(abs(base[0]), abs(base[1]))
    candidates = []
    for e in (e_lo, e_hi):
        if e < 0:
            if magnitude_lo == 0.0:
                return None
            candidates.append(magnitude_lo**e)
        else:
            candidates.append(magnitude_hi**e)
    return max(candidates)


def reduced_count(node: ir.Node, opset: int) -> int | None:
    """How many input elements each output element of a reduction or pooling node combines."""
    x = node.inputs[0]
    dims = _static_dims(x)
    if node.op_type == "AveragePool":
        kernel = node.attributes.get("kernel_shape")
        return int(np.prod(kernel.value)) if kernel is not None else None
    if dims is None:
        return None
    if node.op_type == "GlobalAveragePool":
        return int(np.prod(dims[2:]))
    axes_attr = node.attributes.get("axes")
    if axes_attr is not None:
        axes = list(axes_attr.value)
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        array = constant_array(node.inputs[1])
        if array is None:
            return None
        axes = array.reshape(-1).tolist()
    else:
        axes = []
    if not axes:
        noop = node.attributes.get("noop_with_empty_axes")
        if noop is not None and noop.value:
            return 1
        return int(np.prod(dims))
    return int(np.prod([dims[a] for a in axes]))


def _static_dims(value: ir.Value) -> list[int] | None:
    if value.shape is None:
        return None
    dims = list(value.shape)
    if not all(isinstance(d, int) for d in dims):
        return None
    return dims


def _is_float(value: ir.Value | None) -> bool:
    return value is not None and value.dtype is not None and value.dtype.is_floating_point()


# --- static analyses ----------------------------------------------------------------------------

_PASSTHROUGH = frozenset({
    "Identity", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Gather",
    "Split", "Expand", "Tile", "MaxPool", "ReduceMax", "ReduceMin", "Pad", "DepthToSpace",
    "SpaceToDepth", "Resize", "GlobalMaxPool", "GatherElements", "Dropout",
})
_UNIT_RANGE = {"Sigmoid": (0.0, 1.0), "HardSigmoid": (0.0, 1.0), "Softmax": (0.0, 1.0),
               "Tanh": (-1.0, 1.0)}
Interval = tuple[float, float]


def value_bounds(graph: ir.Graph) -> dict[ir.Value, Interval]:
    """Static (lower, upper) bounds of float values, where the graph proves them.

    A deliberately small interval analysis: bounded sources (constants, Sigmoid, Tanh, Clip,
    Softmax), propagated through element-wise affine ops and data movement. It exists to tell a
    YOLO ``(2 * sigmoid(x)) ** 2`` (bounded) from an ``exp(conv(x))`` (not).
    """
    bounds: dict[ir.Value, Interval] = {}

    def bound_of(value: ir.Value | None) -> Interval | None:
        if value is None:
            return None
        if value in bounds:
            return bounds[value]
        array = constant_array(value)
        if array is None or array.size == 0 or not np.issubdtype(array.dtype, np.number):
            return None
        return float(np.min(array)), float(np.max(array))

    for node in graph:
        result = _transfer(node, bound_of)
        if result is None:
            continue
        for output in node.outputs:
            if _is_float(output) and output.name:
                bounds[output] = result
    return bounds


def _transfer(node: ir.Node, bound_of: Callable) -> Interval | None:
    op = node.op_type
    ins = [bound_of(v) for v in node.inputs]
    first = ins[0] if ins else None
    if op in _UNIT_RANGE:
        return _UNIT_RANGE[op]
    if op == "Clip":
        return _clip(node, first, ins)
    if op == "Relu":
        return None if first is None else (max(0.0, first[0]), max(0.0, first[1]))
    if op in _PASSTHROUGH:
        return first
    if op == "Concat":
        return None if any(b is None for b in ins) else (min(b[0] for b in ins),
                                                          max(b[1] for b in ins))
    if op == "Neg" and first is not None:
        return -first[1], -first[0]
    if op == "Abs" and first is not None:
        low = 0.0 if first[0] <= 0.0 <= first[1] else min(abs(first[0]), abs(first[1]))
        return low, max(abs(first[0]), abs(first[1]))
    if op == "Exp" and first is not None:
        return math.exp(min(first[0], 700.0)), math.exp(min(first[1], 700.0))
    if op in ("Add", "Sub", "Mul", "Div") and len(ins) == 2 and None not in ins:
        return _arithmetic(op, ins[0], ins[1])
    return None


def _clip(node: ir.Node, first: Interval | None, ins) -> Interval | None:
    low, high = -math.inf, math.inf
    if "min" in node.attributes:
        low = node.attributes["min"].value
    if "max" in node.attributes:
        high = node.attributes["max"].value
    if len(ins) > 1 and ins[1] is not None:
        low = ins[1][0]
    if len(ins) > 2 and ins[2] is not None:
        high = ins[2][1]
    if first is not None:
        low, high = max(low, first[0]), min(high, first[1])
    if math.isinf(low) or math.isinf(high):
        return None
    return low, high


def _arithmetic(op: str, a: Interval, b: Interval) -> Interval | None:
    if op == "Add":
        return a[0] + b[0], a[1] + b[1]
    if op == "Sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "Div":
        if b[0] <= 0.0 <= b[1]:
            return None
        b = (1.0 / b[1], 1.0 / b[0])
    products = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(products), max(products)


def _index_like_values(graph: ir.Graph) -> set[ir.Value]:
    """Float values computed only from integer tensors (through Cast) and constants."""
    index_like: set[ir.Value] = set()
    for node in graph:
        if node.op_type == "Cast" and node.inputs and node.inputs[0] is not None:
            source = node.inputs[0]
            if source.dtype is not None and not source.dtype.is_floating_point():
                index_like.update(o for o in node.outputs if _is_float(o))
                continue
        float_inputs = [v for v in node.inputs if _is_float(v) and constant_array(v) is None]
        if float_inputs and all(v in index_like for v in float_inputs):
            index_like.update(o for o in node.outputs if _is_float(o))
    return index_like
