"""The exporter family a model without app info comes from, told from its graph, and that
family's preprocessing.

Why: a layout told right decodes nothing useful from frames prepared the wrong way (issue 33: a
YOLOX or a PP-YOLOE fed Ultralytics' letterbox finds no boxes at all). Where the graph says the
family, the family's own predictor decides the preprocessing; the start line says which
evidence decided, and where nothing says, the default stays and is called a guess.

- YOLOX, told by a raw YOLOX head (``recognise``: undecoded conv outputs on the YOLOX grid):
  ``yolox/data/data_augment.py::preproc``: top-left letterbox on 114, the content
  ``int(w r) x int(h r)`` (truncated), ``cv2.INTER_LINEAR``, BGR, 0-255, no mean/std (YOLOX
  0.2.0 on; ``demo/ONNXRuntime/onnx_inference.py`` feeds it as is).
- PaddleDetection, told by the inputs ``scale_factor`` / ``im_shape`` (``tools/export_model.py``)
  or a ``ppyoloe`` layout: the configs' ``Resize`` (stretch, ``interp: 2`` cubic) on the RGB
  frame, ``/255``; PicoDet's raw heads normalise with the ImageNet statistics (PicoDet configs'
  ``NormalizeImage``), boxes + scores are taken for PP-YOLOE+ (mean 0, std 1), a guess said as
  one (PP-YOLOE v1 and PicoDet with post-processing use the ImageNet statistics):
  ``infer_cfg.yml`` beside the model settles it (``paddle_record``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from edgefuse.errors import InputError
from edgefuse.vision.detect.graph_tail import tails
from edgefuse.vision.detect.recognise import Evidence, recognise
from edgefuse.vision.model.extra_inputs import EXTRA_INPUTS
from edgefuse.vision.model.paddle_record import (
    INFER_CFG,
    PADDLE_FIT,
    PICODET_NORM,
    PPYOLOE_PLUS_NORM,
)

YOLOX_PREPROCESS = {"resize": "letterbox", "center": False, "pad_value": 114, "color": "BGR",
                    "scale": 1.0, "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0],
                    "interpolation": "linear", "rounding": "floor"}
DEFAULT_GUESS = ("Ultralytics' defaults (centred letterbox on 114, RGB, /255), a guess: nothing "
                 "in or beside the model names its family; confirm it or set 'preprocess:'")


@dataclasses.dataclass(frozen=True)
class FamilyCall:
    """A family's preprocessing (record keys, size excluded) and what told the family."""

    family: str
    record: Mapping[str, Any]
    why: str

    def describe(self) -> str:
        return f"{self.family}'s, {self.why}"


def by_inputs(extras: Sequence[str]) -> FamilyCall | None:
    """PaddleDetection when the model takes its ``scale_factor`` / ``im_shape`` inputs."""
    named = [name for name in extras if name in EXTRA_INPUTS]
    if not named:
        return None
    return FamilyCall("PaddleDetection", {**PADDLE_FIT, **PPYOLOE_PLUS_NORM},
                      f"told by its input {' and '.join(named)}; mean/std are a guess "
                      f"(PP-YOLOE+'s /255 only): put the export's {INFER_CFG} beside the model")


def by_heads(layout: str | None, form: str | None) -> FamilyCall | None:
    """The family a detector layout belongs to alone (None: several families share it)."""
    if layout == "yolox":
        return FamilyCall("YOLOX", YOLOX_PREPROCESS, "told by its raw YOLOX head")
    if layout == "ppyoloe" and form == "pico":
        return FamilyCall("PaddleDetection PicoDet", {**PADDLE_FIT, **PICODET_NORM},
                          f"told by its PicoDet heads (put the export's {INFER_CFG} beside "
                          "the model to be sure)")
    if layout == "ppyoloe":
        return FamilyCall("PaddleDetection", {**PADDLE_FIT, **PPYOLOE_PLUS_NORM},
                          "told by its boxes + scores [1, C, N] outputs; mean/std are a guess "
                          f"(PP-YOLOE+'s /255 only): put the export's {INFER_CFG} beside the "
                          "model")
    return None


def by_outputs(outputs: Sequence[tuple[str, tuple, str]], input_size: tuple[int, int],
               graph: onnx.ModelProto | None) -> FamilyCall | None:
    """The family a detector's outputs tell, where no Detector is open (goldens, calibration
    frames): the same call ``Detector`` makes once it has bound its layout."""
    try:
        found = recognise(outputs, Evidence(input_size, tails=tails(graph) if graph else None))
    except InputError:
        return None  # several layouts fit: no family is told (the Detector says why itself)
    return by_heads(found[0].layout, found[0].form) if found is not None else None
