"""A session and what turns a frame into its input: the half that Detector and Segmenter share.

Why the input plan is derived, not configured: the model's application info (``model_info``)
says how it was trained to see frames, the session says what its input is, and a BUILD_DIR
compiled with AIPP says that the NPU (or its host emulation) already swaps channels and
normalises. The plan takes each from where it is true and checks they agree, so a frame is
never normalised twice (pitfall 4 of shared/reference/apps-and-pipelines.md §2.5):

- AIPP build: the session's input is the uint8 frame the board takes ([1, H, W, 3], or the
  [1, 1.5H, W] bytes of a YUV420SP build); the frame is only letterboxed (or stretched) to the
  AIPP source size, in the channel order of its ``input_format`` (converted to NV12/NV21 for a
  YUV build); a crop in the AIPP spec gets the fitted frame pasted at the crop's place;
- otherwise: the app info's preprocess record (or PaddleDetection's ``infer_cfg.yml`` beside
  the model), else the preprocessing of the family the graph tells (``families``), else
  defaults from the input's shape (letterbox, pad 114, RGB, /255, NCHW float32) called a guess,
  with the caller's overrides, checked against the input; ``origin`` says which decided.

Inputs beside the image are fed only where an exporter defines them (``extra_inputs``:
PaddleDetection's ``scale_factor`` and ``im_shape``, from the frame's geometry).

A frame is written once into the memory the model reads: ``VisionModel`` takes a set of the
session's own input buffers per frame (``feed_pool``) and ``prepare_frame(..., into=)`` resizes
the frame straight into it (``fit_into``; a model-sized scratch only where the input is not the
fitted uint8 frame itself: a float tensor, NCHW, YUV420SP), so on the board no byte of the
model input is copied after the preprocessing wrote it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx

from edgefuse import model_info
from edgefuse._cv import cv2
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.convert.onnx_load import load_onnx
from edgefuse.errors import InputError, Ref
from edgefuse.manifest import AippRecord, BuildManifest
from edgefuse.model_info import TASK_OF_LAYOUT, AppInfo
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.preprocess import Geometry, Preprocess, fit, fit_into, to_tensor
from edgefuse.runtime import DEFAULT_BACKENDS, open_session
from edgefuse.session import InputBuffers, Session
from edgefuse.vision.model import layouts, records
from edgefuse.vision.model.extra_inputs import extra_feeds, split_inputs
from edgefuse.vision.model.families import DEFAULT_GUESS, FamilyCall, by_inputs, by_outputs
from edgefuse.vision.model.feed_pool import FeedPool
from edgefuse.vision.model.paddle_record import infer_cfg_beside, read_infer_cfg

log = logging.getLogger(__name__)

# The record's keys that say how the frame is fitted (the host does it even for an AIPP build).
FIT_KEYS = ("resize", "pad_value", "center", "interpolation", "rounding")
TASK_WORDS = {"detect": "detection", "segment": "segmentation", "classify": "classification"}
APPS = {"detect": ("edgefuse detect", "Detector"), "segment": ("edgefuse segment", "Segmenter")}


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """The image input's name, how frames are fitted and converted, and an AIPP crop canvas."""

    name: str
    preprocess: Preprocess
    aipp: bool = False
    canvas: tuple[int, int, int, int] | None = None  # AIPP source (h, w) and crop (x, y)
    yuv: AippSpec | None = None  # a YUV420SP AIPP: BGR frames become its NV12/NV21 bytes
    extras: tuple[str, ...] = ()  # PaddleDetection's scale_factor / im_shape (extra_inputs)
    origin: str = ""  # who decided the preprocessing, for the start line
    guess: bool = False  # nothing in or beside the model said: a family told later may decide


def app_info_of(source: ModelSource) -> AppInfo | None:
    """The application info a model or BUILD_DIR carries (manifest first, then the ONNX, then
    the ``infer_cfg.yml`` PaddleDetection's exporter writes beside the model), with what its
    exporter's record adds below it (``records``: Ultralytics' metadata)."""
    info = None
    if source.manifest is not None:
        info = model_info.from_manifest_extra(source.manifest.extra, source.label)
    model = source.onnx
    if model is None:
        return info
    if not isinstance(model, onnx.ModelProto):
        path = model
        model = load_onnx(model, external_data=False)  # a damaged file: not-onnx, not a crash
        if info is None:
            info = model_info.from_onnx(model, source.label)
        beside = infer_cfg_beside(path) if info is None else None
        if beside is not None:
            info = read_infer_cfg(beside)
    elif info is None:
        info = model_info.from_onnx(model, source.label)
    return records.with_exporter_record(info, model, source.label)


def plan_input(session: Session, info: AppInfo, manifest: BuildManifest | None,
               overrides: Mapping[str, Any] | None = None,
               family: FamilyCall | None = None) -> InputPlan:
    """How frames become the session's inputs (see the module docstring); ``family`` (told
    from the outputs) decides what neither the app info nor the config says."""
    overrides = dict(overrides or {})
    spec, extras = split_inputs(session.inputs)
    if manifest is not None and manifest.preprocess is not None:
        plan = _aipp_plan(spec.name, manifest.preprocess, info, overrides)
        return dataclasses.replace(plan, extras=extras, origin="the build's AIPP")
    family = family or (None if info.preprocess is not None else by_inputs(extras))
    guess = False
    if info.preprocess is not None:
        base, origin = info.preprocess, info.origin
    elif family is not None:
        base = Preprocess.from_dict(dict(family.record),
                                    base=_default_preprocess(spec, overrides), where=family.family)
        origin = family.describe()
    else:
        base, origin, guess = _default_preprocess(spec, overrides), DEFAULT_GUESS, True
    if overrides:
        origin = f"{origin}; {', '.join(sorted(overrides))} from the config"
    record = Preprocess.from_dict(overrides, base=base, where="preprocess") if overrides else base
    _check_against_input(record, spec)
    return InputPlan(spec.name, record, extras=extras, origin=origin, guess=guess)


def plan_for_source(session: Session, source: ModelSource) -> InputPlan:
    """The plan the apps make for ``source``, without opening a task: where nothing in or
    beside the model says, the family its outputs tell decides, as in ``VisionModel``."""
    info = app_info_of(source) or AppInfo()
    plan = plan_input(session, info, source.manifest)
    if not plan.guess:
        return plan
    graph = source.onnx
    if graph is not None and not isinstance(graph, onnx.ModelProto):
        graph = load_onnx(graph, external_data=False)
    outputs = [(o.name, o.shape, o.dtype.name) for o in session.outputs]
    family = by_outputs(outputs, plan.preprocess.size, graph)
    return plan if family is None else plan_input(session, info, source.manifest, family=family)


def prepare_frame(plan: InputPlan, image: np.ndarray,
                  into: Mapping[str, np.ndarray] | None = None
                  ) -> tuple[Mapping[str, np.ndarray], Geometry]:
    """One BGR frame -> the feeds of the plan's inputs, and the geometry back to the frame.

    A function of the plan alone, so that whatever feeds a session frames (an app, ``edgefuse run
    --frames``, a test) prepares them exactly as the apps do. ``into`` (a session's
    ``input_buffers``, or any arrays of the inputs' shapes) receives the feeds in place and is
    returned as the feeds: the same bytes, without the copies.
    """
    if into is not None:
        geometry = _write_image(plan, image, into[plan.name])
        for name, value in extra_feeds(plan.extras, geometry).items():
            np.copyto(into[name], value, casting="same_kind")
        return into, geometry
    fitted, geometry = fit(image, plan.preprocess)
    tensor = to_tensor(fitted, plan.preprocess)
    if plan.canvas is not None:
        height, width, x, y = plan.canvas
        canvas = np.full((1, height, width, 3), plan.preprocess.pad_value, np.uint8)
        canvas[:, y:y + tensor.shape[1], x:x + tensor.shape[2]] = tensor
        tensor = canvas
    if plan.yuv is not None:
        tensor = plan.yuv.frame_from_bgr(tensor[0])[np.newaxis]
    return {plan.name: tensor, **extra_feeds(plan.extras, geometry)}, geometry


_SCRATCH = threading.local()  # per preprocessing thread: the fitted frame before its conversion


def _scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of ``shape`` this thread reuses frame after frame."""
    kept = getattr(_SCRATCH, "arrays", None)
    if kept is None:
        kept = _SCRATCH.arrays = {}
    array = kept.get(shape)
    if array is None:
        array = kept[shape] = np.empty(shape, np.uint8)
    return array


def _write_image(plan: InputPlan, image: np.ndarray, out: np.ndarray) -> Geometry:
    """``prepare_frame``'s image input written into ``out`` (batch of one)."""
    record = plan.preprocess
    height, width = record.size
    if not plan.aipp:  # a tensor: fit into a reused scratch, convert into ``out``
        fitted = _scratch((height, width, 3))
        geometry = fit_into(image, record, fitted)
        to_tensor(fitted, record, out=out)
        return geometry
    # An AIPP frame (uint8 NHWC): the frame is fitted where it goes, on the AIPP source canvas.
    if plan.canvas is not None:
        canvas_h, canvas_w, x, y = plan.canvas
    else:
        canvas_h, canvas_w, x, y = height, width, 0, 0
    frame = _scratch((canvas_h, canvas_w, 3)) if plan.yuv is not None else out[0]
    place = frame[y:y + height, x:x + width]
    geometry = fit_into(image, record, place)
    if record.color == "RGB":  # the padding is grey: swapping the channels changes it not
        swapped = cv2().cvtColor(place, cv2().COLOR_BGR2RGB, dst=place)
        if not np.may_share_memory(swapped, place):
            np.copyto(place, swapped)
    if plan.canvas is not None:
        pad = record.pad_value
        frame[:y], frame[y + height:] = pad, pad
        frame[y:y + height, :x], frame[y:y + height, x + width:] = pad, pad
    if plan.yuv is not None:
        plan.yuv.frame_from_bgr(frame, out=out[0])
    return geometry


def feeds_from_device_input(plan: InputPlan, model_input: np.ndarray | InputBuffers,
                            geometry: Geometry) -> Mapping[str, np.ndarray]:
    """The feeds for a model input DVPP (or its ``sim`` emulation) already letterboxed into the
    build's YUV420SP bytes [1.5H, W]; refused for a build that does not read those bytes.

    ``model_input`` may be a set of the session's own input buffers that VPC wrote (its image
    input [1, 1.5H, W]; on the board ``input_buffers(memory=<DVPP's allocator>)``): those buffers
    are then the feeds, the extra inputs written into them, and the run copies nothing."""
    height, width = plan.preprocess.size
    buffers = model_input if isinstance(model_input, InputBuffers) else None
    if buffers is not None:
        model_input = buffers[plan.name][0]
    if plan.yuv is None or plan.canvas is not None or model_input.shape != (height * 3 // 2,
                                                                              width):
        raise InputError(
            f"decode: dvpp hands the model YUV420SP {width}x{height}; the model's input plan "
            f"takes {'YUV420SP' if plan.yuv is not None else 'no YUV420SP'} "
            f"{plan.preprocess.size[1]}x{plan.preprocess.size[0]}"
            + (" with an AIPP crop" if plan.canvas is not None else ""),
            hint="compile the model with `--aipp` input_format: YUV420SP and no crop, or use "
                 "decode: cpu", reference=Ref.BAD_PREPROCESS)
    if buffers is not None:
        for name, value in extra_feeds(plan.extras, geometry).items():
            np.copyto(buffers[name], value, casting="same_kind")
        return buffers
    return {plan.name: model_input[np.newaxis], **extra_feeds(plan.extras, geometry)}


def _buffer_shapes(session: Session, plan: InputPlan) -> dict[str, tuple[int, ...]]:
    """The shapes of a batch-of-one frame's feeds, for inputs the session leaves dynamic: the
    image's from the plan, the others' with their dynamic batch as 1 (a dynamic input of any
    other kind is left out: the pool then has no buffers and frames are copied)."""
    height, width = plan.preprocess.size
    record = plan.preprocess
    if plan.yuv is not None:
        image = (1, height * 3 // 2, width) if plan.canvas is None else (
            1, plan.canvas[0] * 3 // 2, plan.canvas[1])
    elif plan.canvas is not None:
        image = (1, plan.canvas[0], plan.canvas[1], 3)
    else:
        image = (1, 3, height, width) if record.layout == "NCHW" else (1, height, width, 3)
    shapes = {}
    for spec in session.inputs:
        if all(isinstance(d, int) for d in spec.shape):
            continue
        if spec.name == plan.name:
            shapes[spec.name] = image
        elif spec.shape and all(isinstance(d, int) for d in spec.shape[1:]):
            shapes[spec.name] = (1, *spec.shape[1:])
    return shapes


def _default_preprocess(spec: Any, overrides: Mapping[str, Any]) -> Preprocess:
    shape = spec.shape
    layout = overrides.get("layout")
    if layout is None and len(shape) == 4:
        layout = "NHWC" if shape[-1] == 3 and shape[1] != 3 else "NCHW"
    if len(shape) != 4:
        raise InputError(f"the model's input {spec.describe()} is not an image batch",
                         hint="edgefuse.vision feeds 4-D image inputs [N, C, H, W] or [N, H, W, C]",
                         reference=Ref.WRONG_MODEL_KIND)
    dims = shape[2:4] if layout == "NCHW" else shape[1:3]
    size = overrides.get("size") or (list(dims) if all(isinstance(d, int) for d in dims) else None)
    if size is None:
        raise InputError(f"the model's input {spec.describe()} has no fixed height and width",
                         hint="set preprocess.size [height, width] in the config",
                         reference=Ref.BAD_PREPROCESS)
    dtype = spec.dtype.name if spec.dtype.name in ("float32", "float16", "uint8") else "float32"
    scale = 1.0 if dtype == "uint8" else 1.0 / 255.0
    return Preprocess(size=tuple(size), layout=layout, dtype=dtype, scale=scale)


def _check_against_input(record: Preprocess, spec: Any) -> None:
    height, width = record.size
    expected = (1, 3, height, width) if record.layout == "NCHW" else (1, height, width, 3)
    shape_ok = len(spec.shape) == 4 and all(
        not isinstance(d, int) or d == e for d, e in zip(spec.shape, expected, strict=True))
    if not shape_ok or spec.dtype.name != record.dtype:
        raise InputError(
            f"the preprocess record makes {record.dtype}[{','.join(map(str, expected))}] but the "
            f"model takes {spec.signature()}",
            hint="fix preprocess (size, layout, dtype) in the model's app info or the config",
            reference=Ref.BAD_PREPROCESS,
        )


def _aipp_plan(name: str, aipp: AippRecord, info: AppInfo,
               overrides: Mapping[str, Any]) -> InputPlan:
    spec = aipp.spec
    width, height = spec.source_size
    fit_w, fit_h = spec.output_size
    geometry_keys = {k: v for k, v in overrides.items() if k in FIT_KEYS}
    ignored = sorted(set(overrides) - set(geometry_keys))
    if ignored:
        log.warning("AIPP build: ignoring preprocess %s (the build's AIPP decides them)",
                    ", ".join(ignored))
    base = info.preprocess.to_dict() if info.preprocess is not None else {}
    _warn_if_aipp_differs(info.preprocess, spec)
    # A YUV420SP build takes NV12/NV21 bytes: the frame is fitted in BGR, then converted.
    color = "BGR" if spec.is_yuv else spec.input_format[:3]
    record = Preprocess.from_dict({
        **{k: base[k] for k in FIT_KEYS if k in base},
        **geometry_keys,
        "size": [fit_h, fit_w], "color": color, "scale": 1.0, "mean": 0.0,
        "std": 1.0, "layout": "NHWC", "dtype": "uint8",
    }, where="AIPP preprocess")
    canvas = None
    if spec.crop and (spec.crop[2], spec.crop[3]) != (width, height):
        canvas = (height, width, spec.crop[0], spec.crop[1])
    return InputPlan(name, record, aipp=True, canvas=canvas, yuv=spec if spec.is_yuv else None)


def _warn_if_aipp_differs(record: Preprocess | None, spec: AippSpec) -> None:
    """The model was trained with ``record``; the build's AIPP should do the same arithmetic."""
    if record is None:
        return
    mean_px = np.asarray(record.mean) / record.scale
    std_px = np.asarray(record.std) / record.scale
    aipp_mean = np.asarray(spec.mean, dtype=float)
    aipp_std = 1.0 / np.asarray(spec.var_reci, dtype=float)
    same = (spec.model_color == record.color
            and np.allclose(mean_px, aipp_mean, rtol=1e-3, atol=1e-3)
            and np.allclose(std_px, aipp_std, rtol=1e-3))
    if not same:
        log.warning("the build's AIPP (%s, mean %s, std %s) differs from the model's preprocess "
                    "record (%s, mean %s, std %s in pixel units)", spec.model_color,
                    aipp_mean.tolist(), aipp_std.tolist(), record.color, mean_px.tolist(),
                    std_px.tolist())


class VisionModel:
    """A session that takes BGR frames: ``preprocess``, ``infer``, and the task's post-process."""

    task = ""

    def __init__(self, session: Session, *, info: AppInfo | None = None,
                 manifest: BuildManifest | None = None,
                 preprocess: Mapping[str, Any] | None = None, label: str = "the model") -> None:
        self.session = session
        self.info = info or AppInfo()
        self.label = label
        self.feed_pool: FeedPool | None = None
        if self.info.task is not None and self.info.task != self.task:
            raise self._wrong_kind(f"its app info says task '{self.info.task}'", self.info.task)
        self.plan = plan_input(session, self.info, manifest, preprocess)
        outputs = [(o.name, o.shape, o.dtype.name) for o in session.outputs]
        self.layout = self._find_layout(outputs)
        self._check_layout()
        if self.layout is None:  # dynamic output shapes: one run tells
            self.warm_up()
        family = self._family() if self.plan.guess else None
        if family is not None:
            self.plan = plan_input(session, self.info, manifest, preprocess, family)
        self.feed_pool = FeedPool(session, _buffer_shapes(session, self.plan))

    @classmethod
    def open(cls, model: Any, *, backends: str | Iterable[str] = DEFAULT_BACKENDS,
             strict: bool = False, info: AppInfo | None = None,
             session_options: Mapping[str, Any] | None = None, **task_options: Any) -> Any:
        """Open an .onnx file, a BUILD_DIR or a ModelProto on the first backend that runs it.

        ``session_options`` go to ``open_session`` (``threads``, ``device_id``, ...), the other
        keyword arguments to the class (``conf``, ``class_names``, ``preprocess``, ...).
        """
        source = resolve_source(model)
        info = info or app_info_of(source)
        session = open_session(source, backends, strict=strict, **dict(session_options or {}))
        try:
            return cls(session, info=info, manifest=source.manifest, label=source.label,
                       **task_options)
        except BaseException:
            session.close()
            raise

    # ---- stages -------------------------------------------------------------------------------

    def preprocess(self, image: np.ndarray) -> tuple[Mapping[str, np.ndarray], Geometry]:
        """The frame written into a free set of the session's input buffers
        (``self.feed_pool``), or into arrays of its own while every set is in use (or before the
        pool exists: the warm-up run in the constructor)."""
        pool = self.feed_pool
        return prepare_frame(self.plan, image, pool.take() if pool is not None else None)

    def preprocess_device(self, model_input: np.ndarray | InputBuffers,
                          geometry: Geometry) -> tuple[Mapping[str, np.ndarray], Geometry]:
        """The feeds of a model input DVPP already made (``decode: dvpp``): its bytes, or the
        session's input buffers VPC wrote them into (``feeds_from_device_input``)."""
        return feeds_from_device_input(self.plan, model_input, geometry), geometry

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.session.run(feeds)

    def postprocess(self, outputs: dict[str, np.ndarray], geometry: Geometry) -> Any:
        raise NotImplementedError

    def __call__(self, image: np.ndarray) -> Any:
        """The result for one BGR frame, in this thread."""
        feeds, geometry = self.preprocess(image)
        return self.postprocess(self.infer(feeds), geometry)

    def warm_up(self) -> None:
        """One run on a grey frame (first-run allocations); tells the layout if shapes did not."""
        height, width = self.plan.preprocess.size
        outputs = self.infer(self.preprocess(np.full((height, width, 3), 114, np.uint8))[0])
        if self.layout is None:
            self.layout = self._find_layout(
                [(n, a.shape, a.dtype.name) for n, a in outputs.items()])
            self._check_layout(after_run=True)

    def close(self) -> None:
        self.session.close()

    def _family(self) -> FamilyCall | None:
        """The family the outputs tell (a task's own layouts), for a model nothing else names."""
        return None

    @property
    def preprocess_note(self) -> str:
        """Who decided the preprocessing, for the line an app prints at start."""
        return f"preprocess: {self.plan.origin}" if self.plan.origin else ""

    @property
    def layout_note(self) -> str:
        """How the output layout was chosen, for the line an app prints at start ("": no more
        to say than its name)."""
        return ""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- checks -------------------------------------------------------------------------------

    def _find_layout(self, outputs: list[tuple[str, tuple, str]]) -> str | None:
        """The app info's layout, else the one the output shapes tell (None: not yet known)."""
        return self.info.postprocess.layout or layouts.detect_layout(
            outputs, len(self.info.classes) or None)

    def _check_layout(self, after_run: bool = False) -> None:
        if self.layout is None:
            if after_run:
                raise InputError(
                    f"cannot tell how to decode the outputs of {self.label}",
                    context="outputs: " + "; ".join(o.describe() for o in self.session.outputs),
                    hint="set postprocess.layout in the config (yolov8, yolov5, yolo_head, yolox, "
                         "end2end, ppyoloe, seg_logits, seg_sigmoid, seg_argmax)",
                    reference=Ref.BAD_LAYOUT,
                )
            return
        kind = TASK_OF_LAYOUT[self.layout]
        if kind != self.task:
            outputs = ", ".join(o.signature() for o in self.session.outputs)
            raise self._wrong_kind(f"its output {outputs} reads as a {TASK_WORDS[kind]} "
                                   f"model ({self.layout})", kind)

    def _wrong_kind(self, why: str, found: str | None = None) -> InputError:
        """The model is not this task's; when it is the other app's, the hint says which."""
        return InputError(
            f"{self.label} is not a {TASK_WORDS[self.task]} model: {why}",
            hint=other_app(found, {
                "detect": "give a detector (yolov8, yolov5, yolo_head, yolox, end2end or "
                          "ppyoloe outputs)",
                "segment": "give a segmentation model ([1, C, H, W] logits or a mask)"}[self.task]),
            reference=Ref.WRONG_MODEL_KIND,
        )


def other_app(kind: str | None, otherwise: str) -> str:
    """The hint for a model of the wrong kind: for a task the other app runs, ``it is a
    segmentation model: run it with `edgefuse segment` ...`` then ``otherwise`` (the outputs may
    have been misread); just ``otherwise`` for the rest."""
    app = APPS.get(kind or "")
    if app is None:
        return otherwise
    command, task_class = app
    return (f"it is a {TASK_WORDS[kind]} model: run it with `{command}` (in code, "
            f"{task_class}.open); if it is not, {otherwise}")
