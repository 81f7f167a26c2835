"""Host sessions over an AIPP build take the same camera frames as the board.

Why: with static AIPP (``edgefuse compile --aipp``) the OM's input is the raw uint8 frame (NHWC,
BGR/RGB/YUV) and the NPU crops, converts and normalises it; the build's host ONNX still takes the
float NCHW tensor the network was trained on. An app written against the board's session would
then need a second code path on a laptop. Instead the host session exposes the frame input the
manifest records and replays AIPP's arithmetic in numpy (``AippSpec.emulate``, written by the
compile stage) before ONNX Runtime, so one app, one feed dict, runs on every backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.manifest import BuildManifest
from edgefuse.session import Session, TensorSpec


def wants_frames(manifest: BuildManifest | None) -> bool:
    """Whether the build's OM takes AIPP frames, so host sessions must too."""
    return bool(manifest and manifest.preprocess)


class AippFrameSession(Session):
    """Wraps a host session: the AIPP input takes uint8 frames; the rest passes through."""

    def __init__(self, inner: Session, manifest: BuildManifest, *, validate: bool = True,
                 fp16: bool = False) -> None:
        """``fp16``: round AIPP's output to float16, as the AI Core hands it to the network
        (the ``sim`` backend does; the ONNX Runtime backends keep float32)."""
        record = manifest.preprocess
        if record is None:
            raise ValueError("AippFrameSession needs a build compiled with AIPP")
        self._inner = inner
        self._spec = record.spec
        self._name = record.input
        self._layout = record.model_input_layout
        self._fp16 = fp16
        self.backend = inner.backend
        recorded = {entry.name: entry for entry in manifest.inputs}
        entry = recorded.get(self._name)
        if entry is None or entry.dtype != "uint8":
            raise InputError(
                f"the build's AIPP input '{self._name}' is not a uint8 input of its manifest",
                hint="re-run `edgefuse compile --aipp ...` to rewrite the build",
                reference=Ref.BAD_BUILD_DIR,
            )
        self._model_dtype = {s.name: s.dtype for s in inner.inputs}[self._name]
        frame = TensorSpec(self._name, tuple(entry.shape), np.dtype(np.uint8))
        super().__init__([frame if s.name == self._name else s for s in inner.inputs],
                         inner.outputs, validate=validate)

    @property
    def inner(self) -> Session:
        """The session on the host ONNX, which takes the model's own (float) input."""
        return self._inner

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        frames = np.asarray(feeds[self._name])
        model_input = np.concatenate(
            [self._spec.emulate(frame, layout=self._layout, fp16=self._fp16) for frame in frames]
        ).astype(self._model_dtype, copy=False)
        return self._inner.run({**feeds, self._name: model_input})

    def end_profiling(self) -> Path:
        return self._inner.end_profiling()

    def _close(self) -> None:
        self._inner.close()
