"""YOLOv8-seg outputs to instance masks in frame pixels, decoded as Ultralytics decodes them.

The layout ``yolov8_seg`` (Ultralytics v8/v9/v11 ``-seg`` exports): ``output0 [1, 4+C+M, N]``
(cx, cy, w, h in input pixels, C class scores, M mask coefficients) and ``output1 [1, M, mh, mw]``
prototypes, M = 32 and mh x mw = a quarter of the input in Ultralytics' models.

What Ultralytics 8.4 does (``ultralytics/utils/ops.py``, ``non_max_suppression`` and
``process_mask(..., upsample=True)``, as ``SegmentationPredictor.construct_result`` calls them
with the default ``retina_masks=False``), and so this module:

1. candidates: the best of the C class scores strictly above ``conf`` (no objectness); boxes
   xywh -> xyxy; the M coefficients ride along; at most ``max_nms`` best candidates enter
   class-aware NMS (IoU strictly above ``iou`` suppresses), the best ``max_det`` are kept;
2. ``masks = coefficients @ prototypes`` ([n, mh, mw], logits);
3. upsampled to the input size with ``F.interpolate(mode="bilinear", align_corners=False)``;
4. ``gt_(0.0)``: foreground where the logit is above 0, i.e. where sigmoid(logit) > 0.5;
5. ``crop_mask`` at input resolution: input pixels with ``x1 <= col < x2`` and
   ``y1 <= row < y2`` of the box (upsampling first and cropping after is 8.4's order, Ultralytics
   PR #24272: cropping on the prototype grid first smeared the bilinear edge across the box);
6. instances whose mask is empty are dropped (``keep = masks.amax((-2, -1)) > 0``);
7. the boxes go back to the frame with ``scale_boxes``; the masks, still at input size, are cut
   to the letterboxed frame and resized to it (``scale_image``, here nearest as for class maps);
   the polygon of each mask is ``masks2segments(strategy="all")`` (every outer contour,
   ``cv2.findContours(RETR_EXTERNAL, CHAIN_APPROX_SIMPLE)``, joined into one outline by
   ``data/converter.py`` ``merge_multi_segment``) on the input-size mask, mapped back with
   ``scale_coords``: the result's ``masks.xy``.

With ``retina_masks=True`` Ultralytics makes the masks at frame resolution instead
(``process_mask_native``): the prototype logits upsampled by the smallest factor f (1, 2 or 4)
that puts the letterbox padding on whole pixels, the padding cut and the content resized to the
frame (``scale_masks``), both bilinear; then ``> 0`` and ``crop_mask`` with the frame-pixel
boxes; its polygons are the frame mask's contours. ``decode(..., retina=True)`` does the same.

Steps 3-5 are computed only inside each box: the upsample at those pixels is exactly the full
upsample's (same indices, weights and float32 arithmetic), so a frame with 100 instances costs
100 box-sized interpolations instead of 100 input-sized ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from edgefuse._cv import cv2
from edgefuse.errors import InputError, Ref
from edgefuse.metrics.detect import Detections
from edgefuse.nms import nms
from edgefuse.preprocess import Geometry
from edgefuse.vision.detect.decode import DetectOptions

LAYOUT = "yolov8_seg"


@dataclasses.dataclass(frozen=True)
class InstanceMask:
    """One instance's mask: ``mask`` bool [h, w] whose top-left pixel is (x, y) of its image."""

    x: int
    y: int
    mask: np.ndarray

    @property
    def area(self) -> int:
        return int(np.count_nonzero(self.mask))

    def paste(self, size: tuple[int, int]) -> np.ndarray:
        """The mask in a bool image of ``size`` (height, width)."""
        full = np.zeros(size, bool)
        height, width = self.mask.shape
        full[self.y:self.y + height, self.x:self.x + width] = self.mask
        return full


@dataclasses.dataclass
class Instances:
    """A frame's instances: boxes, scores and classes, and per instance a mask and a polygon,
    all in frame pixels (``polygons[i]`` float32 [P, 2] x, y; empty when the mask is)."""

    detections: Detections
    masks: list[InstanceMask]
    polygons: list[np.ndarray]
    frame_size: tuple[int, int]
    num_classes: int

    def __len__(self) -> int:
        return len(self.masks)

    def class_counts(self) -> np.ndarray:
        """Instances per class id, [num_classes]."""
        return np.bincount(self.detections.classes.astype(np.int64),
                           minlength=self.num_classes)[:self.num_classes]


def split_outputs(outputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(predictions [4+C+M, N], prototypes [M, mh, mw]) among a YOLOv8-seg model's outputs."""
    predictions = [a for a in outputs.values() if a.ndim == 3]
    prototypes = [a for a in outputs.values() if a.ndim == 4]
    if len(predictions) != 1 or len(prototypes) != 1 or predictions[0].shape[0] != 1 or (
            prototypes[0].shape[0] != 1):
        raise InputError(
            "a yolov8_seg model has two outputs: predictions [1, 4+C+M, N] and prototypes "
            "[1, M, mh, mw]",
            context="outputs: " + ", ".join(f"{n} {list(a.shape)}" for n, a in outputs.items()),
            reference=Ref.BAD_LAYOUT)
    rows, protos = predictions[0][0], prototypes[0][0]
    if rows.shape[0] <= 4 + protos.shape[0]:
        raise InputError(
            f"the predictions {list(predictions[0].shape)} have no room for 4 box values, the "
            f"classes and {protos.shape[0]} mask coefficients (the prototypes' channels)",
            reference=Ref.BAD_LAYOUT)
    return rows.astype(np.float32, copy=False), protos.astype(np.float32, copy=False)


def decode(outputs: Mapping[str, np.ndarray], geometry: Geometry,
           options: DetectOptions | None = None, *, retina: bool = False) -> Instances:
    """The model's two outputs -> instances in frame pixels (the module docstring's steps)."""
    options = options or DetectOptions()
    rows, protos = split_outputs(outputs)
    coefficients = protos.shape[0]
    num_classes = rows.shape[0] - 4 - coefficients
    boxes, scores, classes, coefs = _candidates(rows, num_classes, options)
    frame_boxes = geometry.to_frame(boxes)
    if retina:
        masks = _frame_masks(protos, coefs, frame_boxes, geometry.src_size)
    else:
        masks = _input_masks(protos, coefs, boxes, geometry.dst_size)
    keep = [i for i, mask in enumerate(masks) if mask.mask.any()]  # step 6
    masks = [masks[i] for i in keep]
    polygons = [_polygon(mask, None if retina else geometry) for mask in masks]
    if not retina:
        to_frame = _FrameLookup(geometry)
        masks = [to_frame(mask) for mask in masks]
    detections = Detections(frame_boxes[keep], scores[keep].astype(np.float32),
                            classes[keep].astype(np.int64))
    return Instances(detections, masks, polygons, geometry.src_size, num_classes)


def _candidates(rows: np.ndarray, num_classes: int, options: DetectOptions
                ) -> tuple[np.ndarray, ...]:
    """Step 1: (xyxy boxes, scores, classes, coefficients [n, M]) after NMS, best first."""
    class_scores = rows[4:4 + num_classes]
    best = class_scores.max(axis=0)
    picked = np.flatnonzero(best > options.conf)
    chosen = rows[:, picked]
    classes = chosen[4:4 + num_classes].argmax(axis=0)
    scores = best[picked]
    if options.classes is not None:
        wanted = np.isin(classes, options.classes)
        chosen, classes, scores = chosen[:, wanted], classes[wanted], scores[wanted]
    if len(scores) > options.max_nms:
        top = np.argsort(-scores, kind="stable")[:options.max_nms]
        chosen, classes, scores = chosen[:, top], classes[top], scores[top]
    half = chosen[2:4] / 2
    boxes = np.concatenate([chosen[:2] - half, chosen[:2] + half]).T.astype(np.float32)
    kept = nms(boxes, scores, options.iou, None if options.agnostic else classes,
               max_det=options.max_det)
    coefs = np.ascontiguousarray(chosen[4 + num_classes:, kept].T)
    return boxes[kept], scores[kept], classes[kept], coefs


@dataclasses.dataclass(frozen=True)
class _Axis:
    """Bilinear sampling of one axis, ``align_corners=False``, as PyTorch computes it: source
    ``max(scale * (dst + 0.5) - 0.5, 0)`` with ``scale = in / out`` in float32, lower index
    ``floor``, upper index the next one unless at the edge, weight of the upper one
    ``src - lower``."""

    lower: np.ndarray
    upper: np.ndarray
    weight: np.ndarray

    @classmethod
    def of(cls, size_in: int, size_out: int) -> _Axis:
        scale = np.float32(size_in / size_out)
        source = np.maximum(scale * (np.arange(size_out, dtype=np.float32) + np.float32(0.5))
                            - np.float32(0.5), np.float32(0))
        lower = source.astype(np.int64)
        upper = lower + (lower < size_in - 1)
        return cls(lower, upper, (source - lower).astype(np.float32))

    def reach(self, first: int, stop: int) -> slice:
        """Output positions whose lower or upper neighbour lies in ``[first, stop)``."""
        return slice(int(np.searchsorted(self.upper, first, "left")),
                     int(np.searchsorted(self.lower, stop - 1, "right")))


def _input_masks(protos: np.ndarray, coefs: np.ndarray, boxes: np.ndarray,
                 input_size: tuple[int, int]) -> list[InstanceMask]:
    """Steps 2-5: each instance's mask at input size, as the crop of its box."""
    return _masks_in_boxes(_logits(protos, coefs), boxes, input_size)


def _frame_masks(protos: np.ndarray, coefs: np.ndarray, frame_boxes: np.ndarray,
                 frame_size: tuple[int, int]) -> list[InstanceMask]:
    """``retina_masks``: ``process_mask_native`` (see the module docstring), computed inside each
    box only for the last resize."""
    mh, mw = protos.shape[1:]
    height, width = frame_size
    gain = min(4 * mh / height, 4 * mw / width)
    pad = (4 * mh - max(round(height * gain), 1)) | (4 * mw - max(round(width * gain), 1))
    factor = 4 // math.gcd(4, pad | pad // 2)
    logits = _logits(protos, coefs)
    if factor > 1 and len(logits):
        rows, columns = _Axis.of(mh, mh * factor), _Axis.of(mw, mw * factor)
        everything = (slice(0, mh * factor), slice(0, mw * factor))
        logits = np.stack([_bilinear(logit, rows, columns, *everything) for logit in logits])
    up_h, up_w = mh * factor, mw * factor
    gain = min(up_h / height, up_w / width)
    content_h, content_w = max(round(height * gain), 1), max(round(width * gain), 1)
    top, left = round((up_h - content_h) / 2 - 0.1), round((up_w - content_w) / 2 - 0.1)
    content = logits[:, top:top + content_h, left:left + content_w]
    return _masks_in_boxes(np.ascontiguousarray(content), frame_boxes, frame_size)


def _logits(protos: np.ndarray, coefs: np.ndarray) -> np.ndarray:
    # einsum, not matmul: an [n, 32] x [32, mh*mw] product is too small for BLAS, whose thread
    # pool costs milliseconds per call when the inference threads hold the cores.
    if not len(coefs):
        return np.zeros((0, *protos.shape[1:]), np.float32)
    return np.einsum("nc,chw->nhw", coefs, protos)


def _masks_in_boxes(logits: np.ndarray, boxes: np.ndarray,
                    size: tuple[int, int]) -> list[InstanceMask]:
    """Each logit map upsampled (bilinear) to ``size``, above 0, inside its box."""
    mh, mw = logits.shape[1:]
    height, width = size
    rows_axis, columns_axis = _Axis.of(mh, height), _Axis.of(mw, width)
    masks = []
    for logit, box in zip(logits, boxes, strict=True):
        xs, ys = _inside(box[0], box[2], width), _inside(box[1], box[3], height)
        if xs.stop <= xs.start or ys.stop <= ys.start:
            masks.append(InstanceMask(0, 0, np.zeros((0, 0), bool)))
            continue
        masks.append(InstanceMask(xs.start, ys.start,
                                  _bilinear(logit, rows_axis, columns_axis, ys, xs) > 0))
    return masks


def _inside(low: np.float32, high: np.float32, size: int) -> slice:
    """The pixel indices i with ``low <= i < high`` (crop_mask), within ``[0, size)``."""
    return slice(min(max(int(np.ceil(low)), 0), size), min(max(int(np.ceil(high)), 0), size))


def _bilinear(grid: np.ndarray, rows: _Axis, columns: _Axis, ys: slice, xs: slice) -> np.ndarray:
    """The bilinear upsample of ``grid`` at output rows ``ys`` and columns ``xs`` (float32)."""
    top, bottom = grid[rows.lower[ys]], grid[rows.upper[ys]]
    left, right = columns.lower[xs], columns.upper[xs]
    right_weight = columns.weight[xs]
    left_weight = np.float32(1) - right_weight
    upper_weight = rows.weight[ys][:, None]
    lower_weight = np.float32(1) - upper_weight
    return (lower_weight * (left_weight * top[:, left] + right_weight * top[:, right])
            + upper_weight * (left_weight * bottom[:, left] + right_weight * bottom[:, right]))


class _FrameLookup:
    """Input-size masks -> frame-size masks, pixel for pixel as ``Geometry.mask_to_frame`` maps a
    whole class map (the padding cut, then OpenCV's nearest: source ``floor(dst * src / dst)``)."""

    def __init__(self, geometry: Geometry) -> None:
        rows, columns = geometry.content_slices()
        content_h, content_w = geometry.content_size
        height, width = geometry.src_size
        self.rows = rows.start + _nearest(content_h, height)
        self.columns = columns.start + _nearest(content_w, width)

    def __call__(self, crop: InstanceMask) -> InstanceMask:
        height, width = crop.mask.shape
        ys = slice(int(np.searchsorted(self.rows, crop.y)),
                   int(np.searchsorted(self.rows, crop.y + height)))
        xs = slice(int(np.searchsorted(self.columns, crop.x)),
                   int(np.searchsorted(self.columns, crop.x + width)))
        mask = crop.mask[np.ix_(self.rows[ys] - crop.y, self.columns[xs] - crop.x)]
        return InstanceMask(xs.start, ys.start, mask)


def _nearest(size_in: int, size_out: int) -> np.ndarray:
    if size_in == size_out:
        return np.arange(size_out)
    return np.minimum(np.floor(np.arange(size_out) * (size_in / size_out)).astype(np.int64),
                      size_in - 1)


def _polygon(crop: InstanceMask, geometry: Geometry | None) -> np.ndarray:
    """Ultralytics' ``masks2segments(strategy="all")`` then ``scale_coords`` (``geometry`` None:
    the mask is in frame pixels already), float32 [P, 2]."""
    if not crop.mask.any():
        return np.zeros((0, 2), np.float32)
    contours = cv2().findContours(crop.mask.astype(np.uint8), cv2().RETR_EXTERNAL,
                                  cv2().CHAIN_APPROX_SIMPLE)[0]
    outline = (np.concatenate(merge_multi_segment([c.reshape(-1, 2) for c in contours]))
               if len(contours) > 1 else contours[0].reshape(-1, 2))
    points = outline.astype(np.float32) + np.array([crop.x, crop.y], np.float32)
    if geometry is None:
        return points
    return geometry.to_frame(np.concatenate([points, points], axis=1))[:, :2]


def merge_multi_segment(segments: list[np.ndarray]) -> list[np.ndarray]:
    """Several contours joined into one outline through their closest points, both ways round
    (Ultralytics ``data/converter.py`` ``merge_multi_segment``, which ``masks.xy`` uses)."""
    segments = [np.asarray(s).reshape(-1, 2) for s in segments]
    indices: list[list[int]] = [[] for _ in segments]
    for i in range(1, len(segments)):
        distances = ((segments[i - 1][:, None, :] - segments[i][None, :, :]) ** 2).sum(-1)
        first, second = np.unravel_index(np.argmin(distances, axis=None), distances.shape)
        indices[i - 1].append(int(first))
        indices[i].append(int(second))
    last = len(indices) - 1
    merged = []
    for i, index in enumerate(indices):  # forward
        if len(index) == 2 and index[0] > index[1]:
            index = [len(segments[i]) - 1 - x for x in index]
            segments[i] = segments[i][::-1, :]
        segments[i] = np.roll(segments[i], -index[0], axis=0)
        segments[i] = np.concatenate([segments[i], segments[i][:1]])
        if i in (0, last):
            merged.append(segments[i])
        else:
            merged.append(segments[i][:index[1] - index[0] + 1])
    for i in range(last, -1, -1):  # and back
        if i not in (0, last):
            index = indices[i]
            merged.append(segments[i][abs(index[1] - index[0]):])
    return merged
