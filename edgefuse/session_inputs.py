"""Inputs for a Session: seeded random arrays from its specs, or files named on the command line.

Why here and not in each verb: ``run`` and ``bench`` both turn "NAME=FILE" arguments and a batch
size into a feed dict that matches ``session.inputs``, and both must fail with the input's name,
the expected and the given shape rather than inside a backend. Images are decoded with OpenCV,
which is optional (``pip install 'edgefuse[vision]'``) and only imported when an image is given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._deps import require
from edgefuse.errors import InputError
from edgefuse.runtime import TensorSpec

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})


def random_inputs(
    specs: Sequence[TensorSpec], *, batch: int | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random feeds; a dynamic first dimension takes ``batch`` (default 1).

    Floats are standard normal, uint8 spans 0..255 (a camera frame), other integers 0..9.
    """
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
        else:
            feeds[spec.name] = rng.integers(0, 10, shape).astype(spec.dtype)
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
                    reference="bad-batch",
                )
            shape.append(batch)
        elif isinstance(dim, int):
            shape.append(dim)
        elif axis == 0:
            shape.append(1)
        else:
            raise InputError(
                f"input '{spec.name}' has a dynamic dimension {axis} ({dim or '?'})",
                context=f"the model takes {spec.describe()}",
                hint=f"give the input explicitly: --input {spec.name}=FILE.npy",
                reference="bad-feeds",
            )
    return tuple(shape)


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
                    reference="bad-input-argument",
                )
            name, file = names[0], argument
        if name not in names:
            raise InputError(f"--input names '{name}', which is not an input of the model",
                             hint=f"inputs: {', '.join(names)}", reference="bad-input-argument")
        if name in files:
            raise InputError(f"--input gives '{name}' twice", reference="bad-input-argument")
        files[name] = Path(file)
    return files


def load_inputs(
    files: Mapping[str, Path],
    specs: Sequence[TensorSpec],
    *,
    batch: int | None = None,
    seed: int = 0,
    preprocess: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Feeds for every input: from its file when one is given, else seeded random."""
    feeds = random_inputs([s for s in specs if s.name not in files], batch=batch, seed=seed)
    by_name = {spec.name: spec for spec in specs}
    for name, path in files.items():
        feeds[name] = load_input(by_name[name], path, preprocess=preprocess)
    return {spec.name: feeds[spec.name] for spec in specs}


def load_input(
    spec: TensorSpec, path: str | os.PathLike[str], *, preprocess: Mapping[str, Any] | None = None
) -> np.ndarray:
    """One input from ``.npy``, ``.npz`` (the array named like the input, or its only array) or
    an image file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file '{path}' does not exist", reference="bad-input-argument")
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return load_image(spec, path, preprocess=preprocess)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read '{path}' as a numpy file: {exc}",
                         hint="give a .npy, .npz or image file",
                         reference="bad-input-argument") from exc
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            keys = list(loaded.files)
            if spec.name not in keys and len(keys) != 1:
                raise InputError(f"'{path}' holds {keys}, none named '{spec.name}'",
                                 reference="bad-input-argument")
            loaded = loaded[spec.name if spec.name in keys else keys[0]]
    return _as_spec(spec, np.asarray(loaded), path)


def _as_spec(spec: TensorSpec, array: np.ndarray, path: Path) -> np.ndarray:
    if array.dtype != spec.dtype:
        if np.issubdtype(array.dtype, np.floating) and np.issubdtype(spec.dtype, np.floating):
            log.info("%s: cast %s to %s for input '%s'", path, array.dtype, spec.dtype, spec.name)
            array = array.astype(spec.dtype)
        else:
            raise InputError(
                f"'{path}' holds {array.dtype.name}, input '{spec.name}' takes {spec.dtype.name}",
                hint=f"save it with array.astype(numpy.{spec.dtype.name})",
                reference="bad-feeds",
            )
    batch_of_one = bool(spec.shape) and (spec.shape[0] == 1 or not isinstance(spec.shape[0], int))
    if array.ndim == len(spec.shape) - 1 and batch_of_one:
        array = array[np.newaxis]  # one sample saved without its batch dimension
    return array


def load_image(
    spec: TensorSpec, path: Path, *, preprocess: Mapping[str, Any] | None = None
) -> np.ndarray:
    """Decode an image and lay it out as the input wants.

    A uint8 input (an AIPP build: the NPU does the normalisation) gets the resized RGB frame in
    NHWC; a float input gets NCHW (or NHWC, if its last dimension is 3) scaled to 0..1, then
    normalised with ``preprocess["mean"]``/``["std"]`` when the build records them.
    """
    cv2 = require("cv2", extra="vision", purpose="Reading image inputs")
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise InputError(f"OpenCV cannot decode '{path}'", reference="bad-input-argument")
    image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if len(spec.shape) != 4:
        raise InputError(f"input '{spec.name}' is not an image ({spec.describe()})",
                         reference="bad-input-argument")
    channels_last = spec.shape[-1] == 3 or spec.dtype == np.uint8
    height, width = (spec.shape[1], spec.shape[2]) if channels_last else spec.shape[2:]
    if not isinstance(height, int) or not isinstance(width, int):
        height, width = image.shape[:2]
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
    if spec.dtype == np.uint8:
        return image[np.newaxis]
    pixels = image.astype(np.float32) / 255.0
    if preprocess and "mean" in preprocess and "std" in preprocess:
        pixels = (pixels - np.asarray(preprocess["mean"], np.float32)) / np.asarray(
            preprocess["std"], np.float32)
    layout = pixels if channels_last else pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(layout[np.newaxis]).astype(spec.dtype)
