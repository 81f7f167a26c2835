"""Segmentation outputs to a class map in frame pixels: logits, sigmoid masks, argmax maps.

Layouts (contracts.md): ``seg_logits`` ``[1, C, H, W]`` class logits at input resolution, the
class is the argmax; ``seg_sigmoid`` ``[1, 1, H, W]`` the logit of one foreground class
(salient-object and person models), foreground where sigmoid > ``threshold``, i.e. where the
logit > log(t / (1 - t)); ``seg_argmax`` ``[1, H, W]`` or ``[1, 1, H, W]`` integer class ids
(graphs that end in ArgMax, such as TF DeepLab on Ascend). Sigmoid maps use 0 = background and
1 = the foreground class.

Why argmax at model resolution, then nearest-neighbour resize (OpenVINO's segmentation demo), and
not upsample-the-logits-then-argmax (VainF DeepLab, rknn): it costs one argmax over H x W
instead of h x w x C bilinear samples, on the frame's part of the input only (the letterbox
padding is cut first). Borders differ by at most a pixel of the model's grid; the golden tests
fix this convention.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Geometry

LAYOUTS = ("seg_logits", "seg_sigmoid", "seg_argmax")


@dataclasses.dataclass
class Segmentation:
    """A frame's class map [h, w] (uint8 for up to 256 classes) and its number of classes."""

    class_map: np.ndarray
    num_classes: int

    def pixel_counts(self) -> np.ndarray:
        """Pixels per class id, [num_classes]."""
        return np.bincount(self.class_map.ravel(), minlength=self.num_classes)[:self.num_classes]


def decode(output: np.ndarray, layout: str, geometry: Geometry, *,
           num_classes: int | None = None, threshold: float = 0.5) -> Segmentation:
    """The model's segmentation output -> the class map at the frame's size.

    ``num_classes`` only matters for ``seg_argmax`` maps, whose outputs do not say it.
    """
    rows, columns = geometry.content_slices()
    if layout == "seg_logits":
        logits = _batch_of_one(output, 4, layout)
        classes = logits.shape[0]
        class_map = logits[:, rows, columns].argmax(axis=0)
    elif layout == "seg_sigmoid":
        logits = _batch_of_one(output, 4, layout)
        if logits.shape[0] != 1:
            raise InputError(f"a seg_sigmoid output has one channel, got {list(output.shape)}",
                             reference=Ref.BAD_LAYOUT)
        cut = math.log(threshold / (1 - threshold)) if 0 < threshold < 1 else None
        if cut is None:
            raise InputError(f"the mask threshold must be in (0, 1), got {threshold}",
                             reference=Ref.BAD_LAYOUT)
        classes = 2
        class_map = logits[0, rows, columns] > cut
    elif layout == "seg_argmax":
        ids = output[:, 0] if output.ndim == 4 else output
        class_map = _batch_of_one(ids, 3, layout)[rows, columns]
        classes = num_classes or int(class_map.max(initial=0)) + 1
    else:
        raise InputError(f"unknown segmentation layout '{layout}'",
                         hint=f"one of: {', '.join(LAYOUTS)}", reference=Ref.BAD_LAYOUT)
    dtype = np.uint8 if classes <= 256 else np.int32
    return Segmentation(geometry.mask_to_frame(class_map.astype(dtype)), classes)


def _batch_of_one(output: np.ndarray, ndim: int, layout: str) -> np.ndarray:
    if output.ndim != ndim or output.shape[0] != 1:
        raise InputError(f"a {layout} output has {ndim} axes and a batch of 1, got "
                         f"{list(output.shape)}", reference=Ref.BAD_LAYOUT)
    return output[0]
