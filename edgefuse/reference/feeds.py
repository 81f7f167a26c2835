"""Model inputs: one generator of seeded random feeds, one file format, one check.

Why one system: verify, quantize, run and bench all need feeds that fit a model, from seeded
random draws or from files. Each had grown its own generator, its own file convention and its own
validator, so the same bad file was refused in two different ways, or not at all. Here:

- ``random_feeds`` draws feeds for input specs (float N(0,1), uint8 0..255 like a camera frame,
  bool 0/1, other integers 0..9); a dynamic first dimension takes the batch (default 1), any other
  dynamic dimension cannot be guessed and is an error saying how to fix the shape.
- ``--inputs FILE.npz|DIR`` is the file format on every verb: an ``.npz`` holds one array per input
  name (one sample), a folder holds one ``.npz`` per sample. ``feed_set`` reads it. For a model
  with one image input, ``--inputs`` may also be a folder of images or a video: each image (or
  up to ``VIDEO_FRAMES`` frames spread over the video) becomes a sample through the model's
  preprocessing record (``edgefuse.preprocess.Preprocess``, the record the manifest and
  the apps use), so a detector is calibrated on what it will see, not on noise.
- ``FeedChecker`` (``edgefuse.session``) checks every sample, the same check a Session runs, so a
  calibration file made for another resolution fails naming the file, the input, the expected and
  the given shape instead of deep inside ONNX Runtime.

``run --input NAME=FILE`` (``.npy``, ``.npz`` or an image per input) is the older convention; it
is still read (``load_inputs``), with a deprecation note in the CLI.
"""

from __future__ import annotations

import logging
import os
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from edgefuse import model_info
from edgefuse._checks import integer_at_least
from edgefuse._deps import require
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Preprocess
from edgefuse.session import FeedChecker, TensorSpec

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v"})
VIDEO_FRAMES = 16  # samples taken from a video, spread evenly over it

FeedSet = list[dict[str, np.ndarray]]
FeedSource = str | os.PathLike[str] | Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]]


def input_specs(model: onnx.ModelProto) -> tuple[TensorSpec, ...]:
    """The specs of ``model``'s runtime inputs (initializers listed as inputs excluded)."""
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
            for d in tensor_type.shape.dim
        )
        specs.append(TensorSpec(value.name, shape, _numpy_dtype(value.name, tensor_type)))
    return tuple(specs)


def random_feeds(
    specs: Sequence[TensorSpec], *, seed: int = 0, batch: int | None = None
) -> dict[str, np.ndarray]:
    """Seeded random feeds for ``specs``; a dynamic first dimension takes ``batch`` (default 1).

    Floats are standard normal, uint8 spans 0..255 (a camera frame), bool 0..1, other integers
    0..9; the draws follow the order of ``specs``.
    """
    if batch is not None:
        integer_at_least("batch", batch, 1)
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        shape = concrete_shape(spec, batch)
        if np.issubdtype(spec.dtype, np.floating):
            feeds[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        elif spec.dtype == np.uint8:
            feeds[spec.name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif spec.dtype == np.bool_:
            feeds[spec.name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(spec.dtype, np.integer):
            feeds[spec.name] = rng.integers(0, 10, shape).astype(spec.dtype)
        else:
            raise InputError(
                f"input '{spec.name}' has dtype {spec.dtype}, for which no random input is defined",
                hint="pass real inputs with --inputs FILE.npz",
                reference=Ref.UNSUPPORTED_INPUT_DTYPE,
            )
    return feeds


def concrete_shape(spec: TensorSpec, batch: int | None = None) -> tuple[int, ...]:
    """The spec's shape with the batch filled in; other dynamic dimensions cannot be guessed."""
    shape = []
    for axis, dim in enumerate(spec.shape):
        if axis == 0 and batch is not None:
            if isinstance(dim, int) and dim != batch:
                raise InputError(
                    f"input '{spec.name}' has a fixed batch of {dim}, not {batch}",
                    context=f"the model takes {spec.describe()}",
                    hint="export or compile the model with a dynamic batch (or a batch gear)",
                    reference=Ref.BAD_BATCH,
                )
            shape.append(batch)
        elif isinstance(dim, int):
            shape.append(dim)
        elif axis == 0:
            shape.append(1)
        else:
            raise InputError(
                f"input '{spec.name}' has a dynamic dimension {axis} ('{dim or '?'}'), so random "
                "inputs cannot be made",
                context=f"the model takes {spec.describe()}",
                hint="fix the shape with `edgefuse convert --input NAME:d0,d1,...` or pass real "
                "inputs with --inputs FILE.npz",
                reference=Ref.DYNAMIC_INPUT_SHAPE,
            )
    return tuple(shape)


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """One sample from an .npz file (one array per input name)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("it holds a single array, not named arrays")
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"cannot read inputs from '{path}': {_reason(exc)}",
            hint="save inputs with numpy.savez(path, **{input_name: array})",
            reference=Ref.BAD_INPUTS_FILE,
        ) from exc


def feed_set(
    specs: Sequence[TensorSpec],
    inputs: FeedSource | None,
    *,
    seed: int = 0,
    samples: int = 1,
    batch: int | None = None,
    preprocess: Preprocess | None = None,
) -> FeedSet:
    """Samples to run a model with ``specs`` on: ``inputs`` (one .npz, a folder of .npz, a folder
    of images or a video for a one-image-input model, one mapping or a list of mappings), or
    ``samples`` seeded random draws (seeds ``seed``, ``seed + 1``, ...).

    Images and video frames go through ``preprocess`` (default: a plain resize to the input's
    height and width, RGB, scaled to 0..1). Every sample is checked against the specs (names,
    shapes, dtype); float arrays are cast to the input's float dtype.
    """
    if inputs is None:
        return [random_feeds(specs, seed=seed + index, batch=batch) for index in range(samples)]
    images = _image_files(inputs)
    if images is not None:
        labelled = _from_images(images, specs, preprocess)
    else:
        labelled = _load(inputs)
    if not labelled:
        raise InputError(
            f"no input samples in '{inputs}'",
            hint="a folder of inputs holds one .npz file per sample",
            reference=Ref.BAD_INPUTS_FILE,
        )
    checker = FeedChecker(specs)
    return [checker.conform(feeds, label=label) for label, feeds in labelled]


def _image_files(inputs: FeedSource) -> list[Path] | Path | None:
    """The images of a folder that holds no .npz, or a video file; None for anything else."""
    if not isinstance(inputs, (str, os.PathLike)):
        return None
    path = Path(inputs)
    if path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES:
        return path
    if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
        return [path]
    if path.is_dir() and not any(path.glob("*.npz")):
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        return found or None
    return None


def calibration_preprocess(
    model: onnx.ModelProto, given: Preprocess | str | os.PathLike[str] | None
) -> Preprocess | None:
    """The record images become inputs through: ``given`` (a record or a YAML/JSON file), else
    the one the model carries in its application info, else None (``image_preprocess``)."""
    if isinstance(given, Preprocess):
        return given
    if given is not None:
        return Preprocess.from_file(given)
    info = model_info.from_onnx(model, "the model")
    return info.preprocess if info is not None else None


def image_preprocess(spec: TensorSpec) -> Preprocess:
    """What calibration images become without a record: resized to the input, RGB, 0..1."""
    if len(spec.shape) != 4 or not all(isinstance(d, int) for d in spec.shape[1:]):
        raise InputError(
            f"input '{spec.name}' ({spec.describe()}) is not an image batch with a fixed size, "
            "so images cannot be fed to it",
            hint="give --inputs as .npz files instead",
            reference=Ref.BAD_INPUTS_FILE,
        )
    layout = "NHWC" if spec.shape[-1] == 3 and spec.shape[1] != 3 else "NCHW"
    size = spec.shape[2:4] if layout == "NCHW" else spec.shape[1:3]
    dtype = spec.dtype.name if spec.dtype.name in ("float32", "float16", "uint8") else "float32"
    return Preprocess(size=tuple(size), resize="stretch", layout=layout, dtype=dtype,
                      scale=1.0 if dtype == "uint8" else 1.0 / 255.0)


def _from_images(images: list[Path] | Path, specs: Sequence[TensorSpec],
                 preprocess: Preprocess | None) -> list[tuple[str, Mapping[str, np.ndarray]]]:
    if len(specs) != 1:
        raise InputError(
            f"images and videos feed models with one image input; this one takes {len(specs)}",
            context="; ".join(spec.describe() for spec in specs),
            hint="give --inputs as .npz files, one array per input name",
            reference=Ref.BAD_INPUTS_FILE,
        )
    spec = specs[0]
    record = preprocess or image_preprocess(spec)
    frames = _video_frames(images) if isinstance(images, Path) else _read_images(images)
    log.info("calibration: %d image(s) through %s", len(frames), record.to_dict())
    return [(label, {spec.name: record(frame)[0]}) for label, frame in frames]


def _read_images(paths: list[Path]) -> list[tuple[str, np.ndarray]]:
    cv2 = require("cv2", extra="vision", purpose="Reading images as inputs")
    frames = []
    for path in paths:
        frame = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if frame is None:
            raise InputError(f"OpenCV cannot decode the image '{path}'",
                             hint="remove it from the folder, or convert it to PNG or JPEG",
                             reference=Ref.BAD_INPUTS_FILE)
        frames.append((str(path), frame))
    return frames


def _video_frames(path: Path) -> list[tuple[str, np.ndarray]]:
    cv2 = require("cv2", extra="vision", purpose="Reading a video as inputs")
    capture = cv2.VideoCapture(str(path))
    try:
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        if not capture.isOpened() or count <= 0:
            raise InputError(f"OpenCV cannot read the video '{path}'",
                             hint="check that the file plays, or extract frames to a folder",
                             reference=Ref.BAD_INPUTS_FILE)
        wanted = sorted({round(i * (count - 1) / max(VIDEO_FRAMES - 1, 1))
                         for i in range(min(VIDEO_FRAMES, count))})
        frames = []
        for index in range(count):
            ok, frame = capture.read()
            if not ok:
                break
            if index in wanted:
                frames.append((f"{path} frame {index}", frame))
    finally:
        capture.release()
    if not frames:
        raise InputError(f"no frame could be decoded from '{path}'",
                         reference=Ref.BAD_INPUTS_FILE)
    return frames


def _load(inputs: FeedSource) -> list[tuple[str, Mapping[str, np.ndarray]]]:
    if isinstance(inputs, Mapping):
        return [("inputs", inputs)]
    if isinstance(inputs, (str, os.PathLike)):
        path = Path(inputs)
        if path.is_dir():
            return [(str(p), load_npz(p)) for p in sorted(path.glob("*.npz"))]
        if not path.exists():
            pattern = any(char in str(path) for char in "*?[")
            raise InputError(
                f"no such inputs file: '{path}'",
                hint=("--inputs takes no glob pattern: give the folder that holds the images "
                      f"('{_folder_of_pattern(path)}')") if pattern else
                     "give an .npz file, a folder of .npz files, or (a model with one image "
                     "input) a folder of images or a video",
                reference=Ref.FILE_NOT_FOUND)
        return [(str(path), load_npz(path))]
    return [(f"sample {index}", feeds) for index, feeds in enumerate(inputs)]


def _folder_of_pattern(path: Path) -> Path:
    """The folder above the first part of ``path`` that holds a glob character."""
    parts = path.parts
    first = next(index for index, part in enumerate(parts) if any(c in part for c in "*?["))
    return Path(*parts[:first]) if first else Path(".")


# ---- run --input NAME=FILE (the older convention) ------------------------------------------------


def parse_input_args(arguments: Iterable[str], specs: Sequence[TensorSpec]) -> dict[str, Path]:
    """``NAME=FILE`` pairs (a bare ``FILE`` when the model has one input) -> name -> path."""
    names = [spec.name for spec in specs]
    files: dict[str, Path] = {}
    for argument in arguments:
        name, separator, file = argument.partition("=")
        if not separator:
            if len(names) != 1:
                raise InputError(
                    f"--input {argument!r} does not say which input it is for",
                    hint=f"write NAME=FILE, NAME one of: {', '.join(names)}",
                    reference=Ref.BAD_INPUT_ARGUMENT,
                )
            name, file = names[0], argument
        if name not in names:
            raise InputError(f"--input names '{name}', which is not an input of the model",
                             hint=f"inputs: {', '.join(names)}",
                             reference=Ref.BAD_INPUT_ARGUMENT)
        if name in files:
            raise InputError(f"--input gives '{name}' twice", reference=Ref.BAD_INPUT_ARGUMENT)
        files[name] = Path(file)
    return files


def load_inputs(
    files: Mapping[str, Path],
    specs: Sequence[TensorSpec],
    *,
    batch: int | None = None,
    seed: int = 0,
    aipp: AippSpec | None = None,
) -> dict[str, np.ndarray]:
    """Feeds for every input: from its file when one is given, else seeded random."""
    feeds = random_feeds([s for s in specs if s.name not in files], batch=batch, seed=seed)
    by_name = {spec.name: spec for spec in specs}
    for name, path in files.items():
        feeds[name] = load_input(by_name[name], path, aipp=aipp)
    return {spec.name: feeds[spec.name] for spec in specs}


def load_input(
    spec: TensorSpec, path: str | os.PathLike[str], *, aipp: AippSpec | None = None
) -> np.ndarray:
    """One input from ``.npy``, ``.npz`` (the array named like the input, or its only array) or
    an image file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file '{path}' does not exist", reference=Ref.BAD_INPUT_ARGUMENT)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return load_image(spec, path, aipp=aipp)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read '{path}' as a numpy file: {_reason(exc)}",
                         hint="give a .npy, .npz or image file",
                         reference=Ref.BAD_INPUT_ARGUMENT) from exc
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            keys = list(loaded.files)
            if spec.name not in keys and len(keys) != 1:
                raise InputError(f"'{path}' holds {keys}, none named '{spec.name}'",
                                 reference=Ref.BAD_INPUT_ARGUMENT)
            loaded = loaded[spec.name if spec.name in keys else keys[0]]
    return FeedChecker([spec]).conform({spec.name: loaded}, label=str(path))[spec.name]


def load_image(spec: TensorSpec, path: Path, *, aipp: AippSpec | None = None) -> np.ndarray:
    """Decode an image and lay it out as the input wants.

    A uint8 input (an AIPP build: the NPU does the normalisation) gets the frame AIPP expects,
    resized to its source size; a float input gets RGB scaled to 0..1, NCHW (or NHWC, if its last
    dimension is 3).
    """
    cv2 = require("cv2", extra="vision", purpose="Reading image inputs")
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise InputError(f"OpenCV cannot decode '{path}'", reference=Ref.BAD_INPUT_ARGUMENT)
    if aipp is not None and spec.dtype == np.uint8:
        return aipp.frame_from_bgr(image)[np.newaxis]
    image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if len(spec.shape) != 4:
        raise InputError(f"input '{spec.name}' is not an image ({spec.describe()})",
                         reference=Ref.BAD_INPUT_ARGUMENT)
    channels_last = spec.shape[-1] == 3 or spec.dtype == np.uint8
    height, width = (spec.shape[1], spec.shape[2]) if channels_last else spec.shape[2:]
    if not isinstance(height, int) or not isinstance(width, int):
        height, width = image.shape[:2]
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
    if spec.dtype == np.uint8:
        return image[np.newaxis]
    pixels = image.astype(np.float32) / 255.0
    layout = pixels if channels_last else pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(layout[np.newaxis]).astype(spec.dtype)


def _numpy_dtype(name: str, tensor_type: onnx.TypeProto.Tensor) -> np.dtype:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            f"input '{name}' has ONNX element type {tensor_type.elem_type}, which numpy cannot "
            "hold",
            hint="give the model float, integer, uint8 or bool inputs",
            reference=Ref.UNSUPPORTED_INPUT_DTYPE,
        ) from exc


def _reason(exc: BaseException) -> str:
    """What went wrong reading a numpy file, in the user's terms (not numpy's pickle advice)."""
    text = str(exc)
    if "allow_pickle" in text or "pickled" in text:
        return "it is not a numpy .npy/.npz file (numpy took it for a pickle)"
    return text or type(exc).__name__
