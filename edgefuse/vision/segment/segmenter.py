"""Segmenter: a semantic or instance segmentation model as a pipeline task.

Semantic layouts (``decode``: class scores NCHW or NHWC, a one-channel mask, class ids) give a
class map; ``yolov8_seg`` (``instances``) gives boxes with a mask each. Both are drawn with the
class colours and a legend of the classes in the frame, and described in the JSON Lines record.

Why the checks happen here, before the first frame: an output of the wrong rank, or a class
count that disagrees with the class names, otherwise decodes into plausible nonsense (every
pixel foreground, names shifted by one) or fails on frame 1 with a numpy error. The session's
output shapes say both before anything runs; the error says what was found and what to set.

Where values come from, first found wins: the constructor's arguments (the app's config), the
model's app info (``classes``, ``postprocess.background/activation/conf/iou/max_det``), then
the graph (``activation``: does the mask output come out of a Sigmoid?), then defaults. A
one-channel mask has two classes, background (0) and its foreground (1): a single configured
name is the foreground.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from edgefuse.errors import InputError, Ref
from edgefuse.manifest import BuildManifest
from edgefuse.model_info import ACTIVATIONS, AppInfo
from edgefuse.model_source import resolve_source
from edgefuse.preprocess import Geometry
from edgefuse.session import Session
from edgefuse.vision.detect.decode import DetectOptions
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.labels import LabelPlacer
from edgefuse.vision.draw.legend import draw_legend, legend_rect
from edgefuse.vision.draw.overlay import FILL_ALPHA, draw_detections, draw_masks, label_of, overlay
from edgefuse.vision.model import records
from edgefuse.vision.model.adapter import VisionModel, other_app
from edgefuse.vision.segment import decode as semantic
from edgefuse.vision.segment import instances as instance
from edgefuse.vision.segment.activation import output_activation
from edgefuse.vision.segment.decode import Segmentation
from edgefuse.vision.segment.describe import describe_instances, describe_semantic
from edgefuse.vision.segment.instances import Instances

log = logging.getLogger(__name__)

MASK_FORMATS = ("polygon", "rle")
SHAPES = {  # what each layout reads, for the errors
    "seg_logits": "[1, C, h, w] class scores",
    "seg_logits_nhwc": "[1, h, w, C] class scores",
    "seg_sigmoid": "[1, 1, h, w] (or [1, h, w, 1]) one foreground channel",
    "seg_argmax": "[1, h, w] or [1, 1, h, w] integer class ids",
    "yolov8_seg": "[1, 4+C+M, N] predictions and [1, M, mh, mw] prototypes",
}
RANKS = {"seg_logits": (4,), "seg_logits_nhwc": (4,), "seg_sigmoid": (4,), "seg_argmax": (3, 4)}


class Segmenter(VisionModel):
    """A class map (semantic) or instances (``yolov8_seg``) in frame pixels for each frame."""

    task = "segment"

    def __init__(self, session: Session, *, info: AppInfo | None = None,
                 manifest: BuildManifest | None = None,
                 preprocess: Mapping[str, Any] | None = None, label: str = "the model",
                 class_names: Sequence[str] | None = None,
                 colours: str | Sequence[Any] = "distinct", alpha: float = FILL_ALPHA,
                 background: int | None = None, threshold: float = 0.5,
                 activation: str | None = None,
                 graph: onnx.ModelProto | str | None = None, legend: bool = True,
                 mask_format: str = "polygon", conf: float | None = None,
                 iou: float | None = None, max_det: int | None = None,
                 retina_masks: bool = False) -> None:
        super().__init__(session, info=info, manifest=manifest, preprocess=preprocess,
                         label=label)
        post = self.info.postprocess
        self.names_from = "class_names" if class_names else "the model's app info classes"
        names = tuple(class_names or self.info.classes)
        if self.layout == "seg_sigmoid" and len(names) < 2:
            names = ("background", *(names or ("foreground",)))
        self.class_names = names
        self.instances = self.layout == instance.LAYOUT
        self.palette_spec = colours
        self.alpha = alpha
        self.legend = legend
        if mask_format not in MASK_FORMATS:
            raise InputError(f"unknown mask_format '{mask_format}'",
                             hint=f"one of {', '.join(MASK_FORMATS)}", reference=Ref.BAD_CONFIG)
        self.mask_format = mask_format
        self.retina_masks = retina_masks
        default_background = None if self.instances else 0
        self.background = next((b for b in (background, post.background) if b is not None),
                               default_background)
        self.threshold = threshold
        self._given = {k for k, v in (("conf", conf), ("iou", iou), ("max_det", max_det))
                       if v is not None}
        defaults = DetectOptions()
        self.options = DetectOptions(
            conf=next(v for v in (conf, post.conf, defaults.conf) if v is not None),
            iou=next(v for v in (iou, post.iou, defaults.iou) if v is not None),
            max_det=next(v for v in (max_det, post.max_det, defaults.max_det) if v is not None))
        self.activation = self._activation(activation, post.activation, graph)
        if self.layout == "seg_sigmoid":
            semantic.foreground_cut(threshold, self.activation)  # refuses softmax, bad thresholds
        self._check_outputs()
        self._colours: np.ndarray | None = None
        self._scene_palette = palette.SceneAware(palette.distinct())

    @classmethod
    def open(cls, model: Any, **options: Any) -> Any:
        """``VisionModel.open``, reading the ONNX graph for the mask's activation."""
        source = resolve_source(model)
        options.setdefault("graph", source.onnx)
        return super().open(source, **options)

    # ---- the task -----------------------------------------------------------------------------

    def postprocess(self, outputs: dict[str, np.ndarray],
                    geometry: Geometry) -> Segmentation | Instances:
        if self.instances:
            return instance.decode(outputs, geometry, self.options, retina=self.retina_masks)
        return semantic.decode(next(iter(outputs.values())), self.layout, geometry,
                               num_classes=len(self.class_names) or None,
                               threshold=self.threshold, activation=self.activation)

    def annotate(self, image: np.ndarray, result: Segmentation | Instances) -> np.ndarray:
        """The fill and outline of each class (or instance) with a legend of the classes present
        in class order; instance labels are kept off the legend and each other."""
        colours = self._palette(result.num_classes, image)
        if isinstance(result, Instances):
            out = draw_masks(image, result.masks, result.detections.classes, colours,
                             alpha=self.alpha)
            present = [int(c) for c in np.flatnonzero(result.class_counts())]
        else:
            out = overlay(image, result.class_map, colours, alpha=self.alpha,
                          background=self.background, outline=True)
            present = [int(c) for c in np.flatnonzero(result.pixel_counts())
                       if c != self.background]
        entries = [(label_of(self.class_names, c), colours[c % len(colours)]) for c in present]
        if not self.legend:
            entries = []
        if isinstance(result, Instances):
            legend = legend_rect(image.shape, entries)
            placer = LabelPlacer(image.shape[1], image.shape[0], [legend] if legend else [])
            out = draw_detections(out, result.detections, self.class_names, colours,
                                  placer=placer)
        return draw_legend(out, entries)

    def describe(self, result: Segmentation | Instances) -> dict[str, Any]:
        if isinstance(result, Instances):
            return {"layout": self.layout,
                    **describe_instances(result, self.class_names, self.mask_format)}
        return {"layout": self.layout,
                **describe_semantic(result, self.class_names, self.background)}

    @property
    def layout_note(self) -> str:
        """``layout yolov8_seg (80 classes), told from the output shapes: ...; conf ...``."""
        classes = f" ({len(self.class_names)} classes)" if self.class_names else ""
        if self.info.postprocess.layout is not None:
            why = "set by " + dict(self.info.decided_by).get("layout", "the model's app info")
        else:
            why = f"told from the output shapes: {SHAPES[self.layout]}"
        note = f"layout {self.layout}{classes}, {why}"
        if self.instances:
            options, post = self.options, self.info.postprocess
            origin = (dict(self.info.decided_by).get("thresholds", "the model's app info")
                      if (post.conf, post.iou, post.max_det) != (None, None, None)
                      else "edgefuse")
            values = ", ".join(f"{key} {getattr(options, key):g}"
                               + (" (config)" if key in self._given else "")
                               for key in ("conf", "iou", "max_det"))
            note += f"; {values}, class-aware NMS (defaults from {origin})"
        decided = records.describe_decided(self.info, skip=("layout", "thresholds"))
        return note + (f"; {decided}" if decided else "")

    # ---- set-up -------------------------------------------------------------------------------

    def _palette(self, count: int, image: np.ndarray | None = None) -> np.ndarray:
        """BGR colours by class id: the default ``distinct`` palette avoids the colours the
        scene is full of (``palette.SceneAware``); a named or listed palette is kept as given."""
        if self.palette_spec == "distinct":
            return self._scene_palette.colours(image, count)
        if self._colours is None or len(self._colours) < count:
            self._colours = palette.bgr(palette.palette(self.palette_spec, max(count, 1)))
        return self._colours

    def _activation(self, given: str | None, recorded: str | None,
                    graph: onnx.ModelProto | str | None) -> str:
        """What the graph applied to the scores; only one-channel masks depend on it."""
        for value, where in ((given, "activation"), (recorded, "the app info's activation")):
            if value is not None:
                if value not in ACTIVATIONS:
                    raise InputError(f"unknown {where} '{value}'",
                                     hint=f"one of {', '.join(ACTIVATIONS)}",
                                     reference=Ref.BAD_CONFIG)
                return value
        if self.layout != "seg_sigmoid":
            return "none"
        output = self.session.outputs[0].name
        found, why = output_activation(graph, output)
        if found is None:
            log.warning("%s: cannot tell whether '%s' holds probabilities (%s); thresholding it "
                        "as logits at %s: set activation: sigmoid if the graph ends in Sigmoid",
                        self.label, output, why,
                        round(semantic.foreground_cut(self.threshold, "none"), 4))
            return "none"
        log.info("%s: activation %s (%s)", self.label, found, why)
        return found

    def _check_outputs(self) -> None:
        """Ranks and class counts from the session's output shapes (see the module docstring)."""
        outputs = self.session.outputs
        found = "; ".join(o.describe() for o in outputs)
        if self.instances:
            ranks = sorted(len(o.shape) for o in outputs)
            if ranks != [3, 4]:
                raise self._bad_shape(f"{self.label} has outputs {found}")
            rows, protos = (next(o for o in outputs if len(o.shape) == r) for r in (3, 4))
            if isinstance(rows.shape[1], int) and isinstance(protos.shape[1], int):
                self._check_class_count(rows.shape[1] - 4 - protos.shape[1],
                                        f"its predictions {list(rows.shape)} less 4 box values "
                                        f"and {protos.shape[1]} mask coefficients")
            return
        if self.layout not in RANKS:
            return
        output = outputs[0]
        if len(output.shape) not in RANKS[self.layout]:
            raise self._bad_shape(f"{self.label}'s output {output.describe()} has rank "
                                  f"{len(output.shape)}")
        if self.layout in ("seg_logits", "seg_logits_nhwc"):
            axis = 3 if self.layout == "seg_logits_nhwc" else 1
            classes = output.shape[axis]
            if isinstance(classes, int):
                self._check_class_count(classes, f"axis {axis} of its output {output.describe()}")
        elif len(output.shape) == 4 and all(isinstance(output.shape[a], int) for a in (1, 3)) \
                and 1 not in (output.shape[1], output.shape[3]):
            raise self._bad_shape(f"{self.label}'s output {output.describe()} has no axis of "
                                  "one channel")
        if self.layout == "seg_sigmoid":
            if len(self.class_names) > 2:
                self._check_class_count(2, f"its one-channel output {output.describe()} "
                                           "(background and one foreground)")

    def _check_class_count(self, classes: int, where: str) -> None:
        if not self.class_names or len(self.class_names) == classes:
            return
        source = "class_names" if self.names_from == "class_names" else "classes"
        raise InputError(
            f"{self.label} has {classes} classes ({where}), but {self.names_from} lists "
            f"{len(self.class_names)}: {', '.join(self.class_names)}",
            hint=f"set {source} to the model's {classes} class names, in the order it was "
                 "trained with" + ("" if self.layout == "yolov8_seg" else
                                   " (a background class counts)"),
            reference=Ref.BAD_CONFIG if self.names_from == "class_names" else Ref.BAD_APP_INFO)

    def _bad_shape(self, what: str) -> InputError:
        return InputError(
            f"{what}; layout {self.layout} reads {SHAPES[self.layout]}",
            hint="set layout: to the one that matches ("
                 + "; ".join(f"{name} {shape}" for name, shape in SHAPES.items()) + ")",
            reference=Ref.BAD_LAYOUT)

    def _wrong_kind(self, why: str, found: str | None = None) -> InputError:
        return InputError(
            f"{self.label} is not a segmentation model: {why}",
            hint=other_app(found, "give a segmentation model, or set layout: to how its "
                                  "outputs read (" + "; ".join(
                                      f"{name} {shape}" for name, shape in SHAPES.items()) + ")"),
            reference=Ref.WRONG_MODEL_KIND)
