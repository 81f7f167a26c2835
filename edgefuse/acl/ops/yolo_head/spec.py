"""YoloHead: decode a YOLO output and run class-aware NMS, returning final, fixed-size detections.

Why on the device: the raw head output of a 640x640 YOLOv8 is 84 x 8400 floats; copying it to
the host and running NMS there costs more than many models' whole inference on an Atlas 200I DK
A2. With this op the OM returns at most ``max_detections`` boxes.

Input ``predictions`` is ``[B, 4 + objectness + num_classes, N]``, channel-major: rows ``cx, cy,
w, h`` (input pixels), then the objectness row when ``objectness = 1`` (YOLOv5), then one row of
class probabilities per class. That is YOLOv8's native layout ``[1, 84, 8400]``; YOLOv5's
``[1, 25200, 85]`` gets a ``Transpose`` in front (``append_yolo_head`` inserts it). Why not a
``layout`` string: a string cannot drive an ONNX function without an ``If``, the kernel reads a
class's scores as one contiguous row in this layout, and the transpose is cheap next to NMS.

Semantics (the numpy reference is the definition):

- score = objectness x class probability (v5) or class probability (v8), in float32;
- ``multi_label = 0`` (Ultralytics' predict default): a box competes only in its best class
  (ArgMax, first class on ties); ``multi_label = 1`` (Ultralytics' val, Ascend's
  BatchMultiClassNMS): in every class;
- per class, ONNX ``NonMaxSuppression`` semantics with ``center_point_box = 1``: candidates are
  scores ``> score_threshold``, taken by descending score (ties: lower box index first), a box is
  dropped when its IoU with a kept box of its class is ``> iou_threshold``, at most
  ``max_per_class`` per class (0: ``max_detections``); ONNX leaves the order of equal scores
  open, ONNX Runtime's CPU kernel takes the lower index (the ``BoxInfo`` comparator of
  onnxruntime/core/providers/cpu/object_detection/non_max_suppression.cc) and the tests pin it;
- the kept boxes of all classes are ranked by score, ties by lower box index then lower class
  index, and the first ``max_detections`` are returned.

The decomposition (``function_body``, what ONNX Runtime, ``sim`` and ``compile --no-custom-ops``
run) must hold on CANN too: there NonMaxSuppression returns ``max_output_boxes_per_class * B *
C`` rows, the unused ones ``-1`` (canncommercial/63RC1 oplist/fwoperator/atlasoxol_09_0103.html),
where ONNX Runtime returns exactly the selected rows. So a row with a negative entry gathers
from index 0 and scatters score ``-1`` (the empty mark) into the first spare column of the
score table, a dummy slot no real (batch, box, class) maps to; the per-class limit is a constant
rendered per node (``edgefuse.acl.ops.specialize``), as CANN requires.

Outputs follow the fixed-shape layout of Ascend's ``BatchMultiClassNonMaxSuppression``
(mmdeploy's ``BatchMultiClassNMS``): ``boxes [B, max_detections, 4]`` as x1, y1, x2, y2,
``scores [B, max_detections]``, ``classes [B, max_detections]`` (int32 here), ``num_detections
[B]`` (int32); rows past ``num_detections`` are zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.acl.ops.spec import AttrSpec, OpSpec, OpTensor, Shape, require, require_rank

NAME = "YoloHead"


def _shapes(shapes: Sequence[Shape | None], attrs: Mapping[str, Any]) -> list[Shape]:
    shape = require_rank(NAME, "predictions", shapes[0], 3)
    rows = 4 + attrs["objectness"] + attrs["num_classes"]
    if shape is not None and isinstance(shape[1], int):
        require(
            shape[1] == rows,
            NAME,
            f"predictions has {shape[1]} rows, but 4 box rows + objectness="
            f"{attrs['objectness']} + num_classes={attrs['num_classes']} make {rows}",
        )
    batch = None if shape is None else shape[0]
    count = attrs["max_detections"]
    return [(batch, count, 4), (batch, count), (batch, count), (batch,)]


def _check(attrs: Mapping[str, Any]) -> None:
    require(attrs["num_classes"] >= 1, NAME, "num_classes must be at least 1")
    require(attrs["objectness"] in (0, 1), NAME, "objectness must be 0 (YOLOv8) or 1 (YOLOv5)")
    require(attrs["multi_label"] in (0, 1), NAME, "multi_label must be 0 or 1")
    require(attrs["score_threshold"] >= 0.0, NAME, "score_threshold must be >= 0")
    require(0.0 <= attrs["iou_threshold"] <= 1.0, NAME, "iou_threshold must be in [0, 1]")
    require(attrs["max_detections"] >= 1, NAME, "max_detections must be at least 1")
    require(attrs["max_per_class"] >= 0, NAME, "max_per_class must be >= 0 (0: max_detections)")


def _suppresses(candidate: np.ndarray, kept: np.ndarray, iou_threshold: np.float32) -> bool:
    """ONNX Runtime's IoU test for center-point boxes, operation for operation in float32."""
    half_c, half_k = candidate[2:4] / np.float32(2), kept[2:4] / np.float32(2)
    low = np.maximum(candidate[0:2] - half_c, kept[0:2] - half_k)
    high = np.minimum(candidate[0:2] + half_c, kept[0:2] + half_k)
    if high[0] <= low[0] or high[1] <= low[1]:
        return False
    intersection = (high[0] - low[0]) * (high[1] - low[1])
    if intersection <= 0:
        return False
    union = candidate[2] * candidate[3] + kept[2] * kept[3] - intersection
    return bool(intersection / union > iou_threshold)


def _nms_one_class(boxes, scores, score_threshold, iou_threshold, limit) -> list[int]:
    candidates = [n for n in range(len(scores)) if scores[n] > score_threshold]
    candidates.sort(key=lambda n: (-scores[n], n))
    kept: list[int] = []
    for n in candidates:
        if len(kept) >= limit:
            break
        if not any(_suppresses(boxes[n], boxes[k], iou_threshold) for k in kept):
            kept.append(n)
    return kept


def _reference(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any]) -> list:
    (predictions,) = inputs
    pred = predictions.astype(np.float32)
    batch, _, count = pred.shape
    classes, has_obj = attrs["num_classes"], attrs["objectness"]
    boxes = pred[:, 0:4, :].transpose(0, 2, 1)  # [B, N, 4] cx, cy, w, h
    objectness = pred[:, 4:5, :] * np.float32(has_obj) + np.float32(1 - has_obj)
    scores = pred[:, 4 + has_obj :, :] * objectness  # [B, C, N]
    if not attrs["multi_label"]:
        best = scores.argmax(axis=1)
        scores = np.where(np.arange(classes)[None, :, None] == best[:, None, :], scores, 0)
        scores = scores.astype(np.float32)
    half = boxes[..., 2:4] / np.float32(2)
    corners = np.concatenate([boxes[..., 0:2] - half, boxes[..., 0:2] + half], axis=-1)
    limit_total = attrs["max_detections"]
    limit_class = attrs["max_per_class"] or limit_total
    score_threshold = np.float32(attrs["score_threshold"])
    iou_threshold = np.float32(attrs["iou_threshold"])
    out_boxes = np.zeros((batch, limit_total, 4), np.float32)
    out_scores = np.zeros((batch, limit_total), np.float32)
    out_classes = np.zeros((batch, limit_total), np.int32)
    out_count = np.zeros((batch,), np.int32)
    for b in range(batch):
        kept = [
            (scores[b, c, n], n, c)
            for c in range(classes)
            for n in _nms_one_class(boxes[b], scores[b, c], score_threshold, iou_threshold,
                                    limit_class)
        ]
        kept.sort(key=lambda item: (-item[0], item[1], item[2]))
        kept = kept[:limit_total]
        out_count[b] = len(kept)
        for row, (score, n, c) in enumerate(kept):
            out_boxes[b, row], out_scores[b, row], out_classes[b, row] = corners[b, n], score, c
    dtype = predictions.dtype
    return [out_boxes.astype(dtype), out_scores.astype(dtype), out_classes, out_count]


# The kernel's vec_sel mode 2 and float32 vec_reduce_max exist on these chips only: the TIK pages
# list mode 0 alone for Atlas 200/300/500 inference (Ascend310) and Atlas training (Ascend910),
# and float16 alone for their vec_reduce_max (hiascend canncommercial/80RC1
# apiref/opdevgapi/atlastikapi_07_0081.html and atlastikapi_07_0089.html).
SUPPORTED_FAMILIES = ("ascend310b", "ascend310p", "ascend910b")
UNSUPPORTED_REASON = (
    "its TIK kernel uses vec_sel mode 2 and float32 vec_reduce_max, which Ascend310 and "
    "Ascend910 chips lack (TIK API pages vec_sel and vec_reduce_max)"
)

# ---- the kernel's candidate cap (mirrors YoloHead._capacity in tbe/impl/edgefuse_yolo_head.py) --
#
# The AI Core kernel compacts the boxes whose best score passes ``score_threshold`` into
# Unified Buffer arrays, in box order, and drops those past ``capacity`` without a word; the
# host decomposition keeps them all. With the usual thresholds (0.25) a YOLO model has a few
# hundred candidates; with the 0.001 of mAP evaluation a 640x640 YOLOv8 has thousands, and the
# board's detections differ from the host's. ``sim`` emulates the cap and compile warns.
# UB bytes per AI Core, Ascend C's TOTAL_UB_SIZE per __NPU_ARCH__ (cann/asc-devkit
# impl/basic_api/utils/kernel_utils_constants.h): 3002 (Ascend 310B) 248 KiB, 2002 (Ascend 310P)
# 256 KiB, 2201 (Atlas A2, ascend910b) 192 KiB; the last agrees with hicann/catlass
# include/acot/arch/arch.hpp, AtlasA2::UB_SIZE. On a CANN host compile reads the toolkit's own
# figure, ``get_soc_spec("UB_SIZE")``, records it in the build, and sim uses the recorded figure
# (``edgefuse.acl.compile.unified_buffer``); this table is for hosts without the toolkit.
UB_BYTES = {"ascend310b": 248 * 1024, "ascend310p": 256 * 1024, "ascend910b": 192 * 1024}
KERNEL_UB_RESERVED_BYTES = 16 * 1024
KERNEL_MASK = 64
KERNEL_MAX_CAPACITY = KERNEL_MASK * 255
KERNEL_TILE_BYTES = 14 * 1024 * 4  # TILE_ARRAYS x TILE float32 decode rows
KERNEL_BYTES_PER_CANDIDATE = (8 + 7) * 4  # CANDIDATE_ARRAYS + WORK_ARRAYS, float32
# Below this threshold a model with more boxes than the cap is warned about at compile time:
# predict thresholds (0.25) leave a few hundred candidates, evaluation thresholds (0.001) do not.
LIKELY_OVERFLOW_THRESHOLD = 0.05


def candidate_capacity(
    soc_family: str, attrs: Mapping[str, Any], boxes: int | None = None, ub_bytes: int | None = None
) -> int | None:
    """Candidates per image the kernel keeps on ``soc_family``, by the kernel's own formula;
    None when nothing can be dropped (``boxes`` known and within the cap) or no kernel runs
    there. ``ub_bytes`` overrides the family's UB size (the tests use the TBE stand-in's)."""
    ub = ub_bytes if ub_bytes is not None else UB_BYTES.get(soc_family)
    if ub is None:
        return None
    max_det = int(attrs.get("max_detections", 300))
    fixed = KERNEL_TILE_BYTES + (8 * max_det + int(attrs["num_classes"]) + 4 * KERNEL_MASK) * 4
    capacity = (ub - KERNEL_UB_RESERVED_BYTES - fixed) // KERNEL_BYTES_PER_CANDIDATE
    capacity = min(capacity // KERNEL_MASK * KERNEL_MASK, KERNEL_MAX_CAPACITY)
    if boxes is not None and boxes <= capacity:
        return None
    return capacity


def overflow_warning(
    soc_family: str, attrs: Mapping[str, Any], boxes: int | None, node: str,
    ub_bytes: int | None = None,
) -> str | None:
    """The compile-time warning for a YoloHead whose threshold likely overflows the cap."""
    capacity = candidate_capacity(soc_family, attrs, boxes, ub_bytes)
    threshold = float(attrs.get("score_threshold", 0.25))
    if capacity is None or threshold >= LIKELY_OVERFLOW_THRESHOLD:
        return None
    return (
        f"YoloHead '{node}': score_threshold {threshold:g} with {boxes or 'an unknown number of'} "
        f"boxes likely passes more candidates than the {capacity} per image its {soc_family} "
        "kernel keeps (in box order); the rest are dropped on the board, while ONNX Runtime "
        "keeps them (sim drops them as the board does). For mAP evaluation compare on sim or "
        "the board, raise the threshold, or compile with --no-custom-ops (CANN's NMS has no "
        "such cap)"
    )


# CANN's NonMaxSuppression takes at most 700 as max_output_boxes_per_class ("数值上限为700":
# hiascend canncommercial/800 apiref/aolapi/context/aclnnNonMaxSuppression.md); above it the op
# may exhaust the NPU's resources (the op-support table's nms-max-output-700). The decomposition
# (--no-custom-ops) feeds it max_per_class, or max_detections when that is 0.
CANN_NMS_MAX_OUTPUT = 700


def nms_limit_warning(attrs: Mapping[str, Any], node: str) -> str | None:
    """The compile warning for a YoloHead decomposed onto CANN's NonMaxSuppression with a
    per-class limit above what that op documents."""
    limit = int(attrs.get("max_per_class", 0)) or int(attrs.get("max_detections", 300))
    if limit <= CANN_NMS_MAX_OUTPUT:
        return None
    option = "max_per_class" if int(attrs.get("max_per_class", 0)) else "max_detections"
    return (
        f"YoloHead '{node}' decomposed (--no-custom-ops): its NonMaxSuppression keeps up to "
        f"{limit} boxes per class ({option}), above the {CANN_NMS_MAX_OUTPUT} CANN documents for "
        f"max_output_boxes_per_class; the op may exhaust the NPU's resources. Set max_per_class "
        f"to {CANN_NMS_MAX_OUTPUT} or less (max_detections may stay larger)"
    )


_FLOAT = ("float16", "float32")
_ND = ("ND", "ND")

YOLO_HEAD = OpSpec(
    name=NAME,
    doc=__doc__.splitlines()[0],
    package=__name__.rpartition(".")[0],
    inputs=(
        OpTensor(
            "predictions", "[B, 4 + objectness + num_classes, N] raw head output", "T", _FLOAT, _ND
        ),
    ),
    outputs=(
        OpTensor("boxes", "[B, max_detections, 4] x1, y1, x2, y2", "T", _FLOAT, _ND),
        OpTensor("scores", "[B, max_detections]", "T", _FLOAT, _ND),
        OpTensor("classes", "[B, max_detections]", "tensor(int32)", ("int32",) * 2, _ND),
        OpTensor("num_detections", "[B] valid rows", "tensor(int32)", ("int32",) * 2, _ND),
    ),
    attributes=(
        AttrSpec("num_classes", "int", "number of class rows"),
        AttrSpec("objectness", "int", "1: an objectness row follows the box rows (YOLOv5)", 0),
        AttrSpec("score_threshold", "float", "keep scores strictly above this", 0.25),
        AttrSpec("iou_threshold", "float", "drop boxes whose IoU with a kept box exceeds it", 0.45),
        AttrSpec("max_detections", "int", "rows of the outputs", 300),
        AttrSpec("max_per_class", "int", "kept boxes per class; 0: max_detections", 0),
        AttrSpec("multi_label", "int", "1: a box competes in every class, 0: its best", 0),
    ),
    type_constraints=(("T", ("tensor(float16)", "tensor(float)")),),
    shape_function=_shapes,
    check_attributes=_check,
    reference_function=_reference,
    function_body="""
    zero = Constant <value_int: int = 0> ()
    one = Constant <value_int: int = 1> ()
    axis0 = Constant <value = int64[1] {0}> ()
    axis1 = Constant <value = int64[1] {1}> ()
    last_axis = Constant <value = int64[1] {-1}> ()
    outer_axes = Constant <value = int64[2] {0, 2}> ()
    row0 = Constant <value = int64[1] {0}> ()
    row2 = Constant <value = int64[1] {2}> ()
    row4 = Constant <value = int64[1] {4}> ()
    row5 = Constant <value = int64[1] {5}> ()
    row_end = Constant <value = int64[1] {9223372036854775807}> ()
    zero_f = Constant <value_float: float = 0.0> ()
    one_f = Constant <value_float: float = 1.0> ()
    two_f = Constant <value_float: float = 2.0> ()
    fill = Constant <value_float: float = -1.0> ()
    has_obj = Constant <value_int: int = @objectness> ()
    classes_n = Constant <value_int: int = @num_classes> ()
    multi = Constant <value_int: int = @multi_label> ()
    limit_total = Constant <value_int: int = @max_detections> ()
    limit_class_attr = Constant <value_int: int = @max_per_class> ()
    score_threshold = Constant <value_float: float = @score_threshold> ()
    iou_threshold = Constant <value_float: float = @iou_threshold> ()

    pred = Cast <to: int = 1> (predictions)
    xywh_rows = Slice (pred, row0, row4, axis1)
    boxes_xywh = Transpose <perm: ints = [0, 2, 1]> (xywh_rows)
    centers = Slice (boxes_xywh, row0, row2, last_axis)
    sizes = Slice (boxes_xywh, row2, row4, last_axis)
    half = Div (sizes, two_f)
    low = Sub (centers, half)
    high = Add (centers, half)
    corners = Concat <axis: int = -1> (low, high)

    has_obj_1d = Unsqueeze (has_obj, axis0)
    class_start = Add (row4, has_obj_1d)
    class_rows = Slice (pred, class_start, row_end, axis1)
    obj_row = Slice (pred, row4, row5, axis1)
    has_obj_f = Cast <to: int = 1> (has_obj)
    no_obj_f = Sub (one_f, has_obj_f)
    obj_weighted = Mul (obj_row, has_obj_f)
    objectness = Add (obj_weighted, no_obj_f)
    all_scores = Mul (class_rows, objectness)

    best = ArgMax <axis: int = 1, keepdims: int = 1> (all_scores)
    class_ids = Range (zero, classes_n, one)
    class_column = Unsqueeze (class_ids, outer_axes)
    is_best = Equal (class_column, best)
    multi_b = Cast <to: int = 9> (multi)
    competes = Or (is_best, multi_b)
    competing = Where (competes, all_scores, zero_f)

    per_class_set = Greater (limit_class_attr, zero)
    limit_class = Where (per_class_set, limit_class_attr, limit_total)
    selected = NonMaxSuppression <center_point_box: int = 1> (boxes_xywh, competing, limit_class,
                                                             iou_threshold, score_threshold)
    lowest = ReduceMin <keepdims: int = 1> (selected, axis1)
    is_pad = Less (lowest, zero)
    real = Not (is_pad)
    safe_selected = Where (real, selected, zero)
    gathered = GatherND (competing, safe_selected)
    real_1d = Squeeze (real, axis1)
    selected_scores = Where (real_1d, gathered, fill)
    batch_ix = Slice (safe_selected, row0, axis1, axis1)
    class_ix = Slice (safe_selected, axis1, row2, axis1)
    box_ix = Slice (safe_selected, row2, row_end, axis1)
    box_major = Mul (box_ix, classes_n)
    flat = Add (box_major, class_ix)

    pred_shape = Shape (pred)
    batch = Slice (pred_shape, row0, axis1)
    boxes_n = Slice (pred_shape, row2, row_end)
    slots = Mul (boxes_n, classes_n)
    routed = Where (real, flat, slots)
    scatter_at = Concat <axis: int = 1> (batch_ix, routed)
    limit_1d = Unsqueeze (limit_total, axis0)
    width = Add (slots, limit_1d)
    table_shape = Concat <axis: int = 0> (batch, width)
    empty_table = ConstantOfShape <value = float[1] {-1.0}> (table_shape)
    table = ScatterND (empty_table, scatter_at, selected_scores)
    top_scores, top_at = TopK <axis: int = 1, largest: int = 1, sorted: int = 1> (table, limit_1d)

    valid = Greater (top_scores, fill)
    top_box = Div (top_at, classes_n)
    top_class = Mod (top_at, classes_n)
    box_at = Where (valid, top_box, zero)
    class_at = Where (valid, top_class, zero)
    box_at_3d = Unsqueeze (box_at, last_axis)
    picked = GatherND <batch_dims: int = 1> (corners, box_at_3d)
    valid_3d = Unsqueeze (valid, last_axis)
    boxes_f = Where (valid_3d, picked, zero_f)
    scores_f = Where (valid, top_scores, zero_f)
    boxes = CastLike (boxes_f, predictions)
    scores = CastLike (scores_f, predictions)
    classes = Cast <to: int = 6> (class_at)
    valid_i = Cast <to: int = 7> (valid)
    count = ReduceSum <keepdims: int = 0> (valid_i, axis1)
    num_detections = Cast <to: int = 6> (count)
    """,
    ascend_type="EdgefuseYoloHead",
    soc_families=SUPPORTED_FAMILIES,
    unsupported_reason=UNSUPPORTED_REASON,
    infer_shape_cpp="""
  const TensorDesc p_desc = op.GetInputDescByName("predictions");
  const std::vector<int64_t> p = p_desc.GetShape().GetDims();
  int64_t count = 0;
  if (p.size() != 3 || op.GetAttr("max_detections", count) != GRAPH_SUCCESS) {
    return GRAPH_FAILED;
  }
  const DataType dtype = p_desc.GetDataType();
  const std::vector<std::pair<const char*, std::pair<std::vector<int64_t>, DataType>>> outputs = {
      {"boxes", {{p[0], count, 4}, dtype}},
      {"scores", {{p[0], count}, dtype}},
      {"classes", {{p[0], count}, DT_INT32}},
      {"num_detections", {{p[0]}, DT_INT32}},
  };
  for (const auto& output : outputs) {
    TensorDesc desc = op.GetOutputDescByName(output.first);
    desc.SetShape(ge::Shape(output.second.first));
    desc.SetDataType(output.second.second);
    if (op.UpdateOutputDesc(output.first, desc) != GRAPH_SUCCESS) {
      return GRAPH_FAILED;
    }
  }
  return GRAPH_SUCCESS;
""",
    verify_cpp="""
  const std::vector<int64_t> p = op.GetInputDescByName("predictions").GetShape().GetDims();
  int64_t num_classes = 0;
  int64_t objectness = 0;
  float iou_threshold = 0.0f;
  if (op.GetAttr("num_classes", num_classes) != GRAPH_SUCCESS ||
      op.GetAttr("objectness", objectness) != GRAPH_SUCCESS ||
      op.GetAttr("iou_threshold", iou_threshold) != GRAPH_SUCCESS) {
    return GRAPH_FAILED;
  }
  if (p.size() != 3 || p[1] != 4 + objectness + num_classes) {
    return GRAPH_FAILED;
  }
  if (iou_threshold < 0.0f || iou_threshold > 1.0f) {
    return GRAPH_FAILED;
  }
  return GRAPH_SUCCESS;
""",
)
