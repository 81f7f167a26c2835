"""Sets of model inputs (calibration or comparison samples): from .npz files, a folder, or seeded
random draws, checked against the model's inputs before anything runs.

Why check up front: a calibration file exported for another resolution, or with the input named
``input`` instead of ``images``, would otherwise fail deep inside ONNX Runtime with a message about
an internal tensor, or worse, be broadcast silently. Here it fails naming the file, the input, the
expected and the given shape.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from edgefuse.errors import InputError
from edgefuse.verify import load_feeds, random_feeds

FeedSet = list[dict[str, np.ndarray]]
FeedSource = str | os.PathLike[str] | Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]]


def feed_set(
    model: onnx.ModelProto,
    inputs: FeedSource | None,
    *,
    seed: int = 0,
    samples: int = 1,
    reference: str = "inputs-mismatch",
) -> FeedSet:
    """Samples to run ``model`` on: ``inputs`` (one .npz, a folder of .npz, one mapping or a list
    of mappings), or ``samples`` seeded random draws (seeds ``seed``, ``seed + 1``, ...).

    Every sample is checked against the model's inputs (names, shapes, dtype kind); float arrays
    are cast to the input's float dtype. ``reference`` is the error id a mismatch raises.
    """
    if inputs is None:
        return [random_feeds(model, seed + index) for index in range(samples)]
    labelled = _load(inputs)
    if not labelled:
        raise InputError(
            f"no input samples in '{inputs}'",
            hint="a folder of inputs holds one .npz file per sample",
            reference="bad-inputs-file",
        )
    return [_checked(model, feeds, label, reference) for label, feeds in labelled]


def _load(inputs: FeedSource) -> list[tuple[str, Mapping[str, np.ndarray]]]:
    if isinstance(inputs, Mapping):
        return [("inputs", inputs)]
    if isinstance(inputs, (str, os.PathLike)):
        path = Path(inputs)
        if path.is_dir():
            return [(str(p), load_feeds(p)) for p in sorted(path.glob("*.npz"))]
        if not path.exists():
            raise InputError(f"no such inputs file: '{path}'", reference="file-not-found")
        return [(str(path), load_feeds(path))]
    return [(f"sample {index}", feeds) for index, feeds in enumerate(inputs)]


def _checked(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], label: str, reference: str
) -> dict[str, np.ndarray]:
    initializers = {init.name for init in model.graph.initializer}
    specs = {v.name: v.type.tensor_type for v in model.graph.input if v.name not in initializers}
    missing, unknown = sorted(set(specs) - set(feeds)), sorted(set(feeds) - set(specs))
    if missing or unknown:
        raise InputError(
            f"{label}: input names do not match the model (missing {missing}, unknown {unknown})",
            hint=f"the model's inputs are {sorted(specs)}",
            reference=reference,
        )
    checked = {}
    for name, spec in specs.items():
        array = np.asarray(feeds[name])
        expected = [d.dim_value if d.HasField("dim_value") else None for d in spec.shape.dim]
        if len(expected) != array.ndim or any(
            e is not None and e != got for e, got in zip(expected, array.shape, strict=True)
        ):
            shown = ["?" if e is None else e for e in expected]
            raise InputError(
                f"{label}: input '{name}' has shape {list(array.shape)}, the model expects "
                f"{shown}",
                reference=reference,
            )
        dtype = onnx.helper.tensor_dtype_to_np_dtype(spec.elem_type)
        if np.issubdtype(dtype, np.floating) != np.issubdtype(array.dtype, np.floating):
            raise InputError(
                f"{label}: input '{name}' is {array.dtype}, the model expects {np.dtype(dtype)}",
                reference=reference,
            )
        checked[name] = array.astype(dtype, copy=False)
    return checked
