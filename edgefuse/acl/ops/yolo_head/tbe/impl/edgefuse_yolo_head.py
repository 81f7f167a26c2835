"""EdgefuseYoloHead TIK kernel: YOLO decode, best class, score threshold, class-aware greedy NMS.

Runs inside ATC's TBE compiler (CANN toolkit), never in edgefuse's own process; edgefuse only
checks that this file compiles as Python and that its signature matches the op's OpSpec. The
semantics are those of the op's numpy reference (``yolo_head/spec.py``); unverified on a board.

Algorithm, per image (one AI core; NMS is sequential and edge boards run batch 1):

1. Decode in tiles of ``TILE`` boxes: the box rows and each class row of the tile move to the
   unified buffer (UB) as contiguous bursts (the input is channel-major), scores are
   ``class x objectness`` in float32, and a running ``vec_cmpv_gt``/``vec_sel`` keeps each box's
   best class (first class on ties, like ArgMax).
2. Compact the boxes whose best score is ``> score_threshold`` into candidate arrays (a scalar
   pass; box order is kept, so the lowest slot is the lowest box index). At most ``capacity``
   candidates fit the UB; further ones are dropped -- with the usual thresholds (0.25) YOLO
   models have a few hundred. ``candidate_capacity`` in the op's spec.py mirrors ``_capacity``
   on the host: ``sim`` drops the same candidates and ``edgefuse compile`` warns about low
   thresholds.
3. Greedy NMS by repeated arg-max: ``vec_reduce_max`` finds the best remaining candidate (the
   first of equal maxima, i.e. the lowest box index), it becomes the next output row, and one
   pass of vector ops computes every candidate's IoU with it exactly as ONNX Runtime does
   (corners from centre +- size/2, areas w*h, IoU = inter / union, suppressed when > threshold)
   and removes same-class candidates above the threshold, or the whole class once it has
   ``max_per_class`` boxes. Picking the global maximum each time is per-class NMS merged by
   score, which is the reference's order.

``multi_label = 1`` (every class of a box competes) needs per-class candidate lists and is
refused at compile time; the host decomposition supports it.

Memory is moved in whole 32-byte blocks (data_move), and no move reaches past the tensor it
names: a row whose length is not a whole number of blocks moves its full blocks in one burst and
its tail as the block that ends at the row's end, staged through a scratch block (GM addresses
need no alignment, UB ones do). So rows must span at least one block: at least 16 boxes and
``max_detections >= 16``. ``num_detections`` of fewer than 8 images is smaller than one block:
data_move cannot move less and TIK cannot store a scalar to GM, so it goes through a scratch
block too, read-modify-write -- the block that covers it is read, its first elements replaced,
and written back, so the bytes past its end go back as they were (they lie in the 32 bytes
CANN adds to every device memory segment: aclrtMallocAlign32, hiascend canncommercial/80RC3
apiref/appdevgapi/aclpythondevg_01_0973.html).

Chips: ``vec_sel`` mode 2 and float32 ``vec_reduce_max`` do not exist on Ascend310 (Atlas
200/300/500 inference) or Ascend910 (Atlas training) -- TIK API pages vec_sel and vec_reduce_max
(hiascend canncommercial/80RC1 apiref/opdevgapi/atlastikapi_07_0081.html, _0089.html) -- so the
kernel refuses them and ``edgefuse ops build`` writes its op-info only for Ascend310B, Ascend310P
and Ascend910B (``SUPPORTED_FAMILIES`` in the op's spec.py).
"""

import tbe.common.platform as tbe_platform
from tbe import tik
from tbe.common.utils import para_check

F32 = "float32"
I32 = "int32"
MASK = 64  # float32 lanes per vector repeat
MAX_REPEAT = 255
TILE = 1024  # boxes decoded per pass (a multiple of MASK)
BLOCK_BYTES = 32
UB_RESERVED_BYTES = 16 * 1024
INVALID = -1.0  # score of an empty or removed candidate slot
UNSUPPORTED_SOCS = ("Ascend310", "Ascend910")  # SHORT_SOC_VERSION values, see the docstring
MIN_ROW = 16  # elements of the shortest row the block-exact moves handle (float16: one block)
MAX_CAPACITY = MASK * MAX_REPEAT  # one vector instruction must cover every candidate
CANDIDATE_ARRAYS = 8  # x1, y1, x2, y2, area, score, class (float), class (int32)
WORK_ARRAYS = 7  # IoU scratch rows of candidate length
TILE_ARRAYS = 14  # decode rows of tile length


def _ceil_div(a, b):
    return (a + b - 1) // b


def _dtype_bytes(dtype):
    return 2 if dtype == "float16" else 4


def _block_elems(dtype):
    return BLOCK_BYTES // _dtype_bytes(dtype)


class YoloHead:
    """One compiled kernel for a static predictions shape and fixed attributes."""

    def __init__(self, predictions, attrs):
        self.batch, self.rows, self.boxes = predictions.get("shape")
        self.dtype = predictions.get("dtype").lower()
        self.classes = attrs["num_classes"]
        self.has_obj = attrs["objectness"]
        self.score_threshold = attrs["score_threshold"]
        self.iou_threshold = attrs["iou_threshold"]
        self.max_det = attrs["max_detections"]
        self.per_class = attrs["max_per_class"] or self.max_det
        self.capacity = self._capacity()
        self.tik = tik.Tik()
        shape_out = (self.batch, self.max_det)
        self.pred_gm = self._gm(self.dtype, (self.batch, self.rows, self.boxes), "pred_gm")
        self.boxes_gm = self._gm(self.dtype, (self.batch, self.max_det, 4), "boxes_gm")
        self.scores_gm = self._gm(self.dtype, shape_out, "scores_gm")
        self.classes_gm = self._gm(I32, shape_out, "classes_gm")
        self.num_gm = self._gm(I32, (self.batch,), "num_gm")

    def _gm(self, dtype, shape, name):
        return self.tik.Tensor(dtype, shape, name=name, scope=tik.scope_gm)

    def _ub(self, dtype, count, name):
        """A UB tensor rounded up to whole vector repeats."""
        return self.tik.Tensor(dtype, (_ceil_div(count, MASK) * MASK,), name=name,
                               scope=tik.scope_ubuf)

    def _capacity(self):
        ub_bytes = tbe_platform.get_soc_spec("UB_SIZE") - UB_RESERVED_BYTES
        fixed = (TILE_ARRAYS * TILE + 8 * self.max_det + self.classes + 4 * MASK) * 4
        per_candidate = (CANDIDATE_ARRAYS + WORK_ARRAYS) * 4
        capacity = (ub_bytes - fixed) // per_candidate // MASK * MASK
        capacity = min(capacity, MAX_CAPACITY, _ceil_div(self.boxes, MASK) * MASK)
        if capacity < MASK:
            raise RuntimeError(f"max_detections={self.max_det} leaves no UB for candidates")
        return capacity

    # ---- kernel body -------------------------------------------------------------------------

    def build(self, kernel_name):
        counts = self._ub(I32, max(self.batch, 8), "counts")
        self._fill(counts, self.batch, 0)
        with self.tik.for_range(0, self.batch) as image:
            found = self._detect(image)
            counts[image].set_as(found)
        self._move_out(lambda offset: self.num_gm[offset], counts, self.batch, I32)
        self.tik.BuildCCE(
            kernel_name=kernel_name,
            inputs=[self.pred_gm],
            outputs=[self.boxes_gm, self.scores_gm, self.classes_gm, self.num_gm],
        )
        return self.tik

    def _detect(self, image):
        cand = {
            name: self._ub(F32, self.capacity, f"cand_{name}")
            for name in ("x1", "y1", "x2", "y2", "area", "score", "class")
        }
        cand_class_i = self._ub(I32, self.capacity, "cand_class_i")
        self._fill(cand["score"], self.capacity, INVALID)
        count = self.tik.Scalar(I32, name="count", init_value=0)
        for start in range(0, self.boxes, TILE):
            with self.tik.new_stmt_scope():  # the tile's UB buffers are freed after each tile
                self._decode_tile(image, start, min(TILE, self.boxes - start), cand,
                                  cand_class_i, count)
        return self._select(image, cand, cand_class_i)

    # ---- 1 + 2: decode a tile and compact its candidates ------------------------------------

    def _load_row(self, image, row, start, length, dst, staging, last):
        """predictions[image, row, start:start+length] into ``dst`` as float32."""
        target = dst if self.dtype == F32 else staging
        self._move_in(target, lambda offset: self.pred_gm[image, row, start + offset], length,
                      last, start + length)
        if self.dtype != F32:
            repeats = _ceil_div(length, MASK)
            self.tik.vec_conv(MASK, "", dst, staging, repeats, 8, 4)

    def _move_in(self, dst, gm_at, count, last, row_reach):
        """``count`` elements from ``gm_at(0)`` into ``dst``, never reading past them.

        ``row_reach`` elements of the GM row precede the end of the range, so the tail block can
        be read as the block that ends there (it must be >= one block, see the docstring).
        """
        per_block = _block_elems(self.dtype)
        full, tail = divmod(count, per_block)
        if full:
            self.tik.data_move(dst, gm_at(0), 0, 1, full, 0, 0)
        if tail:
            if row_reach < per_block:
                raise RuntimeError("a predictions row shorter than one block")  # refused earlier
            self.tik.data_move(last, gm_at(count - per_block), 0, 1, 1, 0, 0)
            for k in range(tail):
                dst[full * per_block + k].set_as(last[per_block - tail + k])

    def _move_out(self, gm_at, src, count, dtype):
        """``count`` elements of ``src`` to ``gm_at(0)``, never writing past them.

        The tail goes out as the block that ends at the last element, staged through a scratch
        block (the overlap with the full blocks rewrites the same values). Fewer elements than
        one block are only ever a whole tensor smaller than a block (``num_detections`` of under
        8 images): read-modify-write of the block that covers it, through a scratch block.
        """
        per_block = _block_elems(dtype)
        full, tail = divmod(count, per_block)
        if full == 0:
            short = self.tik.Tensor(dtype, (per_block,), name="short_block",
                                    scope=tik.scope_ubuf)
            self.tik.data_move(short, gm_at(0), 0, 1, 1, 0, 0)
            for k in range(count):
                short[k].set_as(src[k])
            self.tik.data_move(gm_at(0), short, 0, 1, 1, 0, 0)
            return
        self.tik.data_move(gm_at(0), src, 0, 1, full, 0, 0)
        if tail:
            last = self.tik.Tensor(dtype, (per_block,), name="last_block", scope=tik.scope_ubuf)
            for k in range(per_block):
                last[k].set_as(src[count - per_block + k])
            self.tik.data_move(gm_at(count - per_block), last, 0, 1, 1, 0, 0)

    def _decode_tile(self, image, start, length, cand, cand_class_i, count):
        tile = {
            name: self._ub(F32, TILE, f"tile_{name}")
            for name in ("cx", "cy", "w", "h", "obj", "row", "best", "best_class", "half",
                         "x1", "y1", "x2", "y2", "area")
        }
        staging = self._ub(self.dtype, TILE, "staging")
        last = self.tik.Tensor(self.dtype, (_block_elems(self.dtype),), name="last_block",
                               scope=tik.scope_ubuf)
        best_class_i = self._ub(I32, TILE, "best_class_i")
        class_id = self._ub(F32, MASK, "class_id")
        better = self.tik.Tensor("uint16", (TILE // 16,), name="better", scope=tik.scope_ubuf)
        repeats = _ceil_div(length, MASK)
        for row, name in enumerate(("cx", "cy", "w", "h")):
            self._load_row(image, row, start, length, tile[name], staging, last)
        v = self.tik
        # corners exactly as the reference: centre -/+ size / 2, area = w * h
        for centre, size, low, high in (("cx", "w", "x1", "x2"), ("cy", "h", "y1", "y2")):
            v.vec_muls(MASK, tile["half"], tile[size], 0.5, repeats, 8, 8)
            v.vec_sub(MASK, tile[low], tile[centre], tile["half"], repeats, 8, 8, 8)
            v.vec_add(MASK, tile[high], tile[centre], tile["half"], repeats, 8, 8, 8)
        v.vec_mul(MASK, tile["area"], tile["w"], tile["h"], repeats, 8, 8, 8)
        if self.has_obj:
            self._load_row(image, 4, start, length, tile["obj"], staging, last)
        first_class_row = 4 + self.has_obj
        self._fill(tile["best"], TILE, INVALID)
        self._fill(tile["best_class"], TILE, 0.0)
        for c in range(self.classes):
            self._load_row(image, first_class_row + c, start, length, tile["row"], staging,
                           last)
            if self.has_obj:
                v.vec_mul(MASK, tile["row"], tile["row"], tile["obj"], repeats, 8, 8, 8)
            self._fill(class_id, MASK, float(c))
            # strictly greater: on ties the earlier (lower) class stays, like ArgMax
            v.vec_cmpv_gt(better, tile["row"], tile["best"], repeats, 8, 8)
            v.vec_sel(MASK, 2, tile["best"], better, tile["row"], tile["best"], repeats, 8, 8, 8)
            v.vec_sel(MASK, 2, tile["best_class"], better, class_id, tile["best_class"],
                      repeats, 8, 0, 8)
        v.vec_conv(MASK, "round", best_class_i, tile["best_class"], repeats, 8, 8)
        self._compact(tile, best_class_i, length, cand, cand_class_i, count)

    def _compact(self, tile, best_class_i, length, cand, cand_class_i, count):
        score = self.tik.Scalar(F32, name="score")
        with self.tik.for_range(0, length) as i:
            score.set_as(tile["best"][i])
            with self.tik.if_scope(tik.all(score > self.score_threshold, count < self.capacity)):
                for name in ("x1", "y1", "x2", "y2", "area"):
                    cand[name][count].set_as(tile[name][i])
                cand["score"][count].set_as(score)
                cand["class"][count].set_as(tile["best_class"][i])
                cand_class_i[count].set_as(best_class_i[i])
                count.set_as(count + 1)

    # ---- 3: greedy class-aware NMS by repeated arg-max ----------------------------------------

    def _select(self, image, cand, cand_class_i):
        v = self.tik
        repeats = self.capacity // MASK
        out_boxes = self._ub(F32, self.max_det * 4, "out_boxes")
        out_scores = self._ub(F32, self.max_det, "out_scores")
        out_classes = self._ub(I32, self.max_det, "out_classes")
        per_class = self._ub(I32, self.classes, "per_class")
        self._fill(out_boxes, self.max_det * 4, 0.0)
        self._fill(out_scores, self.max_det, 0.0)
        self._fill(out_classes, self.max_det, 0)
        self._fill(per_class, self.classes, 0)
        work = {
            name: self._ub(F32, self.capacity, f"work_{name}")
            for name in ("ix1", "iy1", "ix2", "iy2", "union", "iou", "same_class_iou")
        }
        reduce_out = self._ub(F32, MASK, "reduce_out")
        reduce_work = self._ub(F32, self.capacity, "reduce_work")
        consts = {name: self._ub(F32, MASK, f"const_{name}") for name in ("cls", "thr", "bad")}
        self._fill(consts["thr"], MASK, self.iou_threshold)
        self._fill(consts["bad"], MASK, INVALID)
        same = self.tik.Tensor("uint16", (self.capacity // 16,), name="same",
                               scope=tik.scope_ubuf)
        drop = self.tik.Tensor("uint16", (self.capacity // 16,), name="drop",
                               scope=tik.scope_ubuf)
        best = v.Scalar(F32, name="best")
        at = v.Scalar("uint32", name="at")
        kept = v.Scalar(I32, name="kept", init_value=0)
        box = {name: v.Scalar(F32, name=f"b_{name}") for name in ("x1", "y1", "x2", "y2", "area")}
        label = v.Scalar(F32, name="label")
        label_i = v.Scalar(I32, name="label_i")
        taken = v.Scalar(I32, name="taken")

        with v.for_range(0, self.max_det):
            v.vec_reduce_max(MASK, reduce_out, cand["score"], reduce_work, repeats, 8,
                             cal_index=True)
            best.set_as(reduce_out[0])
            at.set_as(reduce_out.reinterpret_cast_to("uint32")[1])
            # kept < max_det always holds (one row per pass at most); saying so bounds the index
            with v.if_scope(tik.all(best > INVALID / 2, kept < self.max_det)):
                for name in box:
                    box[name].set_as(cand[name][at])
                label.set_as(cand["class"][at])
                label_i.set_as(cand_class_i[at])
                for k, name in enumerate(("x1", "y1", "x2", "y2")):
                    out_boxes[kept * 4 + k].set_as(box[name])
                out_scores[kept].set_as(best)
                out_classes[kept].set_as(label_i)
                kept.set_as(kept + 1)
                taken.set_as(per_class[label_i])
                taken.set_as(taken + 1)
                per_class[label_i].set_as(taken)
                cand["score"][at].set_as(INVALID)
                # IoU of every candidate with the kept box, as ONNX Runtime computes it
                v.vec_maxs(MASK, work["ix1"], cand["x1"], box["x1"], repeats, 8, 8)
                v.vec_maxs(MASK, work["iy1"], cand["y1"], box["y1"], repeats, 8, 8)
                v.vec_mins(MASK, work["ix2"], cand["x2"], box["x2"], repeats, 8, 8)
                v.vec_mins(MASK, work["iy2"], cand["y2"], box["y2"], repeats, 8, 8)
                v.vec_sub(MASK, work["ix2"], work["ix2"], work["ix1"], repeats, 8, 8, 8)
                v.vec_sub(MASK, work["iy2"], work["iy2"], work["iy1"], repeats, 8, 8, 8)
                v.vec_maxs(MASK, work["ix2"], work["ix2"], 0.0, repeats, 8, 8)
                v.vec_maxs(MASK, work["iy2"], work["iy2"], 0.0, repeats, 8, 8)
                v.vec_mul(MASK, work["ix1"], work["ix2"], work["iy2"], repeats, 8, 8, 8)
                v.vec_adds(MASK, work["union"], cand["area"], box["area"], repeats, 8, 8)
                v.vec_sub(MASK, work["union"], work["union"], work["ix1"], repeats, 8, 8, 8)
                v.vec_div(MASK, work["iou"], work["ix1"], work["union"], repeats, 8, 8, 8)
                # only the kept box's class competes with it
                self._fill(consts["cls"], MASK, label)
                v.vec_cmpv_eq(same, cand["class"], consts["cls"], repeats, 8, 0)
                v.vec_sel(MASK, 2, work["same_class_iou"], same, work["iou"], consts["bad"],
                          repeats, 8, 8, 0)
                v.vec_cmpv_gt(drop, work["same_class_iou"], consts["thr"], repeats, 8, 0)
                v.vec_sel(MASK, 2, cand["score"], drop, consts["bad"], cand["score"],
                          repeats, 8, 0, 8)
                with v.if_scope(taken >= self.per_class):
                    v.vec_sel(MASK, 2, cand["score"], same, consts["bad"], cand["score"],
                              repeats, 8, 0, 8)
        self._store(image, out_boxes, out_scores, out_classes)
        return kept

    def _store(self, image, out_boxes, out_scores, out_classes):
        """Write one image's rows, each exactly (``_move_out``)."""
        rows = (
            (out_boxes, lambda offset: self.boxes_gm[image, offset // 4, offset % 4],
             self.max_det * 4),
            (out_scores, lambda offset: self.scores_gm[image, offset], self.max_det),
        )
        for src, gm_at, count in rows:
            if self.dtype == F32:
                staged = src
            else:
                staged = self._ub(self.dtype, count, "staged")
                self._narrow(staged, src, count)
            self._move_out(gm_at, staged, count, self.dtype)
        self._move_out(lambda offset: self.classes_gm[image, offset], out_classes, self.max_det,
                       I32)

    def _narrow(self, dst, src, count):
        """float32 ``src`` into ``dst``'s dtype, ``count`` elements rounded up to whole repeats,
        at most MAX_REPEAT repeats per vec_conv (its repeat_times is 1..255 on every chip): the
        box rows alone are 4 * max_detections elements, 256 repeats past max_detections 4080."""
        repeats = _ceil_div(count, MASK)
        done = 0
        while repeats > 0:
            step = min(repeats, MAX_REPEAT)
            self.tik.vec_conv(MASK, "", dst[done * MASK], src[done * MASK], step, 4, 8)
            done += step
            repeats -= step

    def _fill(self, tensor, count, value):
        """Set ``count`` elements (rounded up to whole repeats) to ``value``."""
        repeats = _ceil_div(count, MASK)
        done = 0
        while repeats > 0:
            step = min(repeats, MAX_REPEAT)
            self.tik.vec_dup(MASK, tensor[done * MASK], value, step, 8)
            done += step
            repeats -= step


@para_check.check_op_params(
    para_check.REQUIRED_INPUT,
    para_check.REQUIRED_OUTPUT,
    para_check.REQUIRED_OUTPUT,
    para_check.REQUIRED_OUTPUT,
    para_check.REQUIRED_OUTPUT,
    para_check.REQUIRED_ATTR_INT,
    para_check.OPTION_ATTR_INT,
    para_check.OPTION_ATTR_FLOAT,
    para_check.OPTION_ATTR_FLOAT,
    para_check.OPTION_ATTR_INT,
    para_check.OPTION_ATTR_INT,
    para_check.OPTION_ATTR_INT,
    para_check.KERNEL_NAME,
)
def edgefuse_yolo_head(
    predictions,
    boxes,
    scores,
    classes,
    num_detections,
    num_classes,
    objectness=0,
    score_threshold=0.25,
    iou_threshold=0.45,
    max_detections=300,
    max_per_class=0,
    multi_label=0,
    kernel_name="edgefuse_yolo_head",
):
    """Build the kernel; tensors are GE dicts (shape, dtype, format)."""
    shape = list(predictions.get("shape"))
    if len(shape) != 3 or shape[1] != 4 + objectness + num_classes:
        raise RuntimeError(
            f"predictions must be [B, 4 + {objectness} + {num_classes}, N], got {shape}"
        )
    if predictions.get("dtype").lower() not in ("float16", F32):
        raise RuntimeError("predictions must be float16 or float32")
    soc = tbe_platform.get_soc_spec("SHORT_SOC_VERSION")
    if soc in UNSUPPORTED_SOCS:
        raise RuntimeError(
            f"EdgefuseYoloHead needs vec_sel mode 2 and float32 vec_reduce_max, which {soc} "
            "does not have; decompose the op (edgefuse compile --no-custom-ops)"
        )
    if multi_label:
        raise RuntimeError("multi_label=1 is not implemented by the AI Core kernel")
    if shape[2] < MIN_ROW or max_detections < MIN_ROW:
        raise RuntimeError(
            f"the AI Core kernel needs at least {MIN_ROW} boxes and max_detections >= {MIN_ROW} "
            f"(its rows move in whole 32-byte blocks), got {shape[2]} boxes and "
            f"max_detections={max_detections}"
        )
    if list(boxes.get("shape")) != [shape[0], max_detections, 4]:
        raise RuntimeError(f"boxes must be [{shape[0]}, {max_detections}, 4]")
    for name, tensor in (("scores", scores), ("classes", classes)):
        if list(tensor.get("shape")) != [shape[0], max_detections]:
            raise RuntimeError(f"{name} must be [{shape[0]}, {max_detections}]")
    if list(num_detections.get("shape")) != [shape[0]]:
        raise RuntimeError(f"num_detections must be [{shape[0]}]")
    attrs = {
        "num_classes": num_classes,
        "objectness": objectness,
        "score_threshold": score_threshold,
        "iou_threshold": iou_threshold,
        "max_detections": max_detections,
        "max_per_class": max_per_class,
    }
    return YoloHead(predictions, attrs).build(kernel_name)
