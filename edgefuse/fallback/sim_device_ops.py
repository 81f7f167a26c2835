"""Where the board's operators return something ONNX Runtime does not, rewritten for ``sim``.

Why: the simulation runs the build's ONNX on ONNX Runtime, whose kernels follow the ONNX spec
exactly; two operators of a build behave otherwise on the board, and a host test that trusts
ONNX Runtime passes on code that breaks there:

- ``NonMaxSuppression``: CANN's returns a fixed ``max_output_boxes_per_class * batch *
  classes`` rows, the unused ones ``-1`` (canncommercial/63RC1 oplist/fwoperator/
  atlasoxol_09_0103.html; restriction ``nms-padded-output`` of the op-support table), where
  ONNX Runtime returns exactly the selected rows. ``pad_nms_like_cann`` appends the ``-1`` rows
  after every NonMaxSuppression of the build (the kept rows first, as ONNX Runtime orders them),
  so post-processing that reads the padding as indices fails on the host too.
- ``edgefuse::YoloHead`` kept as a custom op: its AI Core kernel keeps at most
  ``candidate_capacity`` candidates per image (the boxes whose best score passes the threshold,
  in box order) and drops the rest without a word (``yolo_head/spec.py``).
  ``cap_yolo_head_candidates`` zeroes the scores of the dropped boxes in front of the op, so the
  host decomposition sees the same candidates as the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx.shape_inference

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.acl.ops.spec import DOMAIN as CUSTOM_DOMAIN
from edgefuse.acl.ops.yolo_head.spec import NAME as YOLO_HEAD
from edgefuse.acl.ops.yolo_head.spec import candidate_capacity
from edgefuse.errors import ModelLoadError, Ref

_DEFAULT = ("", "ai.onnx")
MIN_CAP_OPSET = 11  # CumSum


def pad_nms_like_cann(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose NonMaxSuppression outputs are padded as CANN pads them.

    A node without ``max_output_boxes_per_class`` is left as it is: compile refuses it for
    the board (``nms-needs-max-output``), so there is no board behaviour to reproduce.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    rewritten: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        rewritten.append(node)
        if node.op_type != "NonMaxSuppression" or node.domain not in _DEFAULT:
            continue
        if len(node.input) < 3 or not node.input[2]:
            continue
        exact, padded = f"{node.output[0]}__exact", node.output[0]
        node.output[0] = exact
        rewritten += _padding(f"sim_nms_pad_{index}", node, exact, padded)
    del graph.node[:]
    graph.node.extend(rewritten)
    return copy


def _naming(prefix: str) -> tuple[Callable[[str], str],
                                  Callable[[str, np.ndarray], onnx.NodeProto]]:
    """``name(part)``: ``prefix/part``; ``const(part, array)``: a Constant node of that name."""
    def name(part: str) -> str:
        return f"{prefix}/{part}"

    def const(part: str, array: np.ndarray) -> onnx.NodeProto:
        return onnx.helper.make_node("Constant", [], [name(part)],
                                     value=onnx.numpy_helper.from_array(array, name(part)))

    return name, const


def _padding(prefix: str, node: onnx.NodeProto, exact: str, padded: str) -> list:
    """Nodes computing ``padded`` = ``exact`` + ``-1`` rows up to max * batch * classes."""
    name, const = _naming(prefix)
    make = onnx.helper.make_node
    boxes, scores, limit = node.input[0], node.input[1], node.input[2]
    return [
        const("zero", np.array([0], np.int64)),
        const("one", np.array([1], np.int64)),
        const("two", np.array([2], np.int64)),
        const("three", np.array([3], np.int64)),
        const("flat", np.array([1], np.int64)),
        make("Shape", [boxes], [name("boxes_shape")]),
        make("Slice", [name("boxes_shape"), name("zero"), name("one")], [name("batch")]),
        make("Shape", [scores], [name("scores_shape")]),
        make("Slice", [name("scores_shape"), name("one"), name("two")], [name("classes")]),
        make("Cast", [limit], [name("limit_i64")], to=onnx.TensorProto.INT64),
        make("Reshape", [name("limit_i64"), name("flat")], [name("limit")]),
        make("Mul", [name("limit"), name("batch")], [name("per_batch")]),
        make("Mul", [name("per_batch"), name("classes")], [name("rows")]),
        make("Shape", [exact], [name("exact_shape")]),
        make("Slice", [name("exact_shape"), name("zero"), name("one")], [name("kept")]),
        # never negative: ONNX Runtime returns at most max_output_boxes_per_class per class
        make("Sub", [name("rows"), name("kept")], [name("missing")]),
        make("Concat", [name("missing"), name("three")], [name("pad_shape")], axis=0),
        make("ConstantOfShape", [name("pad_shape")], [name("pad")],
             value=onnx.numpy_helper.from_array(np.array([-1], np.int64))),
        make("Concat", [exact, name("pad")], [padded], axis=0),
    ]


def cap_yolo_head_candidates(model: onnx.ModelProto, soc: str,
                             ub_bytes: int | None = None) -> onnx.ModelProto:
    """A copy of ``model`` whose YoloHead nodes see only the candidates the kernel keeps on
    ``soc``: past the first ``candidate_capacity`` boxes (in box order) whose best score is
    above the threshold, a box's score rows are zeroed. ``ub_bytes``: the Unified Buffer size
    the build recorded (the toolkit's, where compile had one), else the soc's from the table."""
    family = validate_soc(soc).short_name
    heads = [n for n in model.graph.node
             if n.op_type == YOLO_HEAD and n.domain in (CUSTOM_DOMAIN, *_DEFAULT)]
    if not heads:
        return model
    opset = next(e.version for e in model.opset_import if e.domain in _DEFAULT)
    if opset < MIN_CAP_OPSET:
        raise ModelLoadError(
            f"the build's model is at opset {opset}; the simulation of YoloHead's candidate cap "
            f"needs opset {MIN_CAP_OPSET} or later (CumSum)",
            hint=f"recompile with --opset {MIN_CAP_OPSET} or later",
            reference=Ref.BAD_ARGUMENT,
        )
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    values = _static_values(copy)
    rewritten: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if node.op_type == YOLO_HEAD and node.domain in (CUSTOM_DOMAIN, *_DEFAULT):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            elem_type, shape = values.get(node.input[0], (onnx.TensorProto.FLOAT, None))
            boxes = shape[2] if shape is not None and isinstance(shape[2], int) else None
            capacity = candidate_capacity(family, attrs, boxes, ub_bytes)
            if capacity is not None:
                capped = f"{node.input[0]}__sim_capped_{index}"
                rewritten += _cap(f"sim_yolo_cap_{index}", node.input[0], capped, attrs,
                                  capacity, opset, elem_type)
                node.input[0] = capped
        rewritten.append(node)
    del graph.node[:]
    graph.node.extend(rewritten)
    return copy


def recorded_unified_buffer(custom_ops: Any) -> int | None:
    """The Unified Buffer bytes a build's manifest recorded (``custom_ops.unified_buffer``)."""
    record = custom_ops.get("unified_buffer") if isinstance(custom_ops, dict) else None
    value = record.get("bytes") if isinstance(record, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def _cap(prefix: str, source: str, capped: str, attrs: dict, capacity: int, opset: int,
         elem_type: int) -> list:
    """Nodes computing ``capped``: ``source`` with the score rows of boxes past the cap zeroed."""
    name, const = _naming(prefix)
    make = onnx.helper.make_node
    has_obj = int(attrs.get("objectness", 0))
    first_class = 4 + has_obj
    nodes = [
        const("axis1", np.array([1], np.int64)),
        const("box_axis", np.array(2, np.int64)),
        const("row0", np.array([0], np.int64)),
        const("row4", np.array([4], np.int64)),
        const("row5", np.array([5], np.int64)),
        const("first_class", np.array([first_class], np.int64)),
        const("end", np.array([np.iinfo(np.int64).max], np.int64)),
        const("threshold", np.array(float(attrs.get("score_threshold", 0.25)), np.float32)),
        const("capacity", np.array(capacity, np.float32)),
        make("Cast", [source], [name("pred")], to=onnx.TensorProto.FLOAT),
        make("Slice", [name("pred"), name("first_class"), name("end"), name("axis1")],
             [name("classes")]),
    ]
    scores = name("classes")
    if has_obj:
        nodes += [
            make("Slice", [name("pred"), name("row4"), name("row5"), name("axis1")],
                 [name("objectness")]),
            make("Mul", [name("classes"), name("objectness")], [name("scores")]),
        ]
        scores = name("scores")
    if opset >= 18:  # ReduceMax takes its axes as an input from opset 18 on
        nodes.append(make("ReduceMax", [scores, name("axis1")], [name("best")], keepdims=1))
    else:
        nodes.append(make("ReduceMax", [scores], [name("best")], axes=[1], keepdims=1))
    nodes += [
        make("Greater", [name("best"), name("threshold")], [name("candidate")]),
        make("Cast", [name("candidate")], [name("candidate_f")], to=onnx.TensorProto.FLOAT),
        make("CumSum", [name("candidate_f"), name("box_axis")], [name("rank")]),
        make("Greater", [name("rank"), name("capacity")], [name("dropped")]),
        make("Not", [name("dropped")], [name("kept")]),
        make("Cast", [name("kept")], [name("kept_f")], to=onnx.TensorProto.FLOAT),
        make("Slice", [name("pred"), name("row0"), name("row4"), name("axis1")],
             [name("box_rows")]),
        make("Slice", [name("pred"), name("row4"), name("end"), name("axis1")],
             [name("score_rows")]),
        make("Mul", [name("score_rows"), name("kept_f")], [name("score_rows_kept")]),
        make("Concat", [name("box_rows"), name("score_rows_kept")], [name("capped_f")], axis=1),
        make("Cast", [name("capped_f")], [capped], to=elem_type),
    ]
    return nodes


def _static_values(model: onnx.ModelProto) -> dict[str, tuple[int, tuple | None]]:
    """Value name -> (element type, dims) where shape inference knows them."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None
                     for d in tensor.shape.dim) if tensor.HasField("shape") else None
        values[value.name] = (tensor.elem_type, dims)
    return values
