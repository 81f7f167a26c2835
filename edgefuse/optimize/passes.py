"""Whole-graph passes the optimize pipeline runs around the pattern rules.

Why these and in this order: the dynamo exporter (``optimize=False``) gives every Conv a zero bias
computed as ``Expand(CastLike(0, x), Shape(W))``; until that is folded, no rule (and no peer tool)
sees a constant bias and every BatchNorm stays in place. So constants are folded first, including
ops whose result depends only on a dtype or a static shape; rules run next; then dead nodes,
duplicate subexpressions and unused initializers go, and Constant nodes become initializers so that
the node count reflects real work.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as ir_passes
import onnxscript.optimizer

from edgefuse.convert.shape_arithmetic import fold_shape_arithmetic


class GraphPass:
    """A pass with a stable id; ``__call__`` returns whether it changed the model."""

    id: ClassVar[str]
    description: ClassVar[str]

    def __call__(self, model: ir.Model) -> bool:
        raise NotImplementedError


class FoldConstants(GraphPass):
    id = "fold-constants"
    description = "evaluate nodes whose inputs are constant, or depend only on dtype/static shape"

    def __call__(self, model: ir.Model) -> bool:
        return onnxscript.optimizer.fold_constants(
            model,
            onnx_shape_inference=True,
            input_size_limit=_FOLD_SIZE_LIMIT,
            output_size_limit=_FOLD_SIZE_LIMIT,
            should_fold=_fold_small_constant_of_shape,
        ).modified


# onnxscript's default input limit (8192 elements) leaves detection heads' anchor grids (an
# 80x80x2 grid is 12800) as Expand/Reshape/Sub chains evaluated on every run; 256 Ki elements
# (1 MiB of float32) folds them while keeping genuinely large computed tensors out of the file.
_FOLD_SIZE_LIMIT = 512 * 512


# onnxscript never folds ConstantOfShape, to keep big zero-filled tensors out of the file. Small
# ones are what the TorchScript exporter builds pad widths and grid shapes from (F.pad, YOLO
# anchors); folding those lets the Shape/Slice/Concat chains behind them fold away too.
_SMALL_CONSTANT_OF_SHAPE = 1024


def _fold_small_constant_of_shape(node: ir.Node) -> bool | None:
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
        return None
    shape = node.inputs[0].const_value if node.inputs and node.inputs[0] is not None else None
    if shape is None:
        return None
    return True if int(np.prod(shape.numpy())) <= _SMALL_CONSTANT_OF_SHAPE else None


class FoldShapeArithmetic(GraphPass):
    id = "fold-shape-arithmetic"
    description = "fold Shape/Gather/Concat chains on a dynamic batch into constants (0/-1)"

    def __call__(self, model: ir.Model) -> bool:
        return fold_shape_arithmetic(model)


class EliminateIdentities(GraphPass):
    id = "remove-identity"
    description = "remove Identity nodes (and the Identity that no-op rules leave behind)"

    def __call__(self, model: ir.Model) -> bool:
        return ir_passes.IdentityEliminationPass()(model).modified


class EliminateCommonSubexpressions(GraphPass):
    id = "eliminate-common-subexpressions"
    description = "merge nodes that compute the same op on the same inputs with the same attributes"

    def __call__(self, model: ir.Model) -> bool:
        return ir_passes.CommonSubexpressionEliminationPass()(model).modified


class RemoveUnused(GraphPass):
    id = "remove-unused"
    description = "remove dead nodes, unused initializers, functions and opset imports"

    def __call__(self, model: ir.Model) -> bool:
        modified = ir_passes.RemoveUnusedNodesPass()(model).modified
        modified |= ir_passes.RemoveUnusedFunctionsPass()(model).modified
        modified |= ir_passes.RemoveUnusedOpsetsPass()(model).modified
        return modified


class LiftConstants(GraphPass):
    id = "lift-constants"
    description = "turn Constant nodes into initializers"

    def __call__(self, model: ir.Model) -> bool:
        return ir_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(
            model
        ).modified


class TopologicalSort(GraphPass):
    id = "topological-sort"
    description = "stable topological order, so outputs are deterministic"

    def __call__(self, model: ir.Model) -> bool:
        return ir_passes.TopologicalSortPass()(model).modified
