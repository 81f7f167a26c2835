"""The inputs an exporter puts beside the image, fed from the preprocessing that was applied.

Why they are fed and not refused: PaddleDetection's standard deploy export
(``tools/export_model.py``) gives every detector the inputs ``image``, ``scale_factor`` and, for
some architectures, ``im_shape``; its predictor (``deploy/python/infer.py``) fills them from
what its ``Resize`` did (``deploy/python/preprocess.py``, ``Resize.__call__``)::

    im_shape     = [resized height, resized width]      (float32, before any padding)
    scale_factor = [im_scale_y, im_scale_x]             (float32)

Both are ``[N, 2]`` per image. They come here from the frame's ``Geometry``: its per-axis scale
and its content size, so a letterbox or a stretch feeds what it actually did.

PP-YOLOE's ``exclude_nms`` export divides its boxes by ``scale_factor`` inside the graph
(``PPYOLOEHead.post_process``: ``pred_bboxes /= scale_factor``): such outputs come out in frame
pixels, less the padding's offset divided by the scale. ``in_graph_geometry`` gives the geometry
that maps those boxes the rest of the way, so the NMS runs on the boxes PaddleDetection's own
NMS sees. Ultralytics' exports take no extra input. Any other extra input is refused by name:
feeding it a guess would run the model on numbers nobody chose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Geometry

SCALE_FACTOR = "scale_factor"
IM_SHAPE = "im_shape"
EXTRA_INPUTS = (SCALE_FACTOR, IM_SHAPE)


def split_inputs(inputs: Sequence[Any]) -> tuple[Any, tuple[str, ...]]:
    """(the image input's spec, the names of the extra inputs), refusing what cannot be fed."""
    images = [spec for spec in inputs if len(spec.shape) == 4]
    others = [spec for spec in inputs if len(spec.shape) != 4]
    unknown = [spec for spec in others if spec.name not in EXTRA_INPUTS]
    if len(inputs) == 1:
        return inputs[0], ()
    if len(images) != 1 or unknown:
        why = (f"'{unknown[0].name}' is none of the extra inputs edgefuse feeds" if unknown
               else f"{len(images)} of them are 4-D images")
        raise InputError(
            f"the model takes {len(inputs)} inputs and {why}",
            context="inputs: " + "; ".join(s.describe() for s in inputs),
            hint="edgefuse.vision feeds one image, and beside it only PaddleDetection's "
                 "scale_factor and im_shape; export the model with the image as its only input",
            reference=Ref.WRONG_MODEL_KIND)
    for spec in others:
        if len(spec.shape) != 2 or spec.shape[1] not in (2, "2") or \
                not spec.dtype.name.startswith("float"):
            raise InputError(
                f"the model's input {spec.describe()} is named like PaddleDetection's "
                f"'{spec.name}' but is not a float [N, 2]",
                hint="export the model with PaddleDetection's tools/export_model.py, or with "
                     "the image as its only input", reference=Ref.WRONG_MODEL_KIND)
    return images[0], tuple(spec.name for spec in others)


def extra_feeds(names: Sequence[str], geometry: Geometry, dtype: str = "float32"
                ) -> dict[str, np.ndarray]:
    """The values of the extra inputs ``names`` for one frame fitted as ``geometry`` says."""
    values = {SCALE_FACTOR: (geometry.scale_y, geometry.scale_x),
              IM_SHAPE: geometry.content_size}
    return {name: np.asarray([values[name]], dtype=dtype) for name in names}


def scaled_outputs(graph: onnx.ModelProto | None, names: Sequence[str]) -> frozenset[str] | None:
    """The graph outputs that ``scale_factor`` reaches (None: no graph to tell)."""
    if SCALE_FACTOR not in names:
        return frozenset()
    if graph is None:
        return None
    reached = {SCALE_FACTOR}
    for node in graph.graph.node:  # ONNX graphs are topologically sorted
        if reached.intersection(node.input):
            reached.update(node.output)
    return frozenset(o.name for o in graph.graph.output if o.name in reached)


def in_graph_geometry(geometry: Geometry) -> Geometry:
    """The geometry of boxes the graph already divided by ``scale_factor``: what remains of
    ``(box - pad) / scale`` is subtracting ``pad / scale``."""
    return dataclasses.replace(geometry, scale_x=1.0, scale_y=1.0,
                               pad_left=geometry.pad_left / geometry.scale_x,  # type: ignore[arg-type]
                               pad_top=geometry.pad_top / geometry.scale_y)  # type: ignore[arg-type]
