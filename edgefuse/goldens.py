"""Goldens: record what a session gives on known inputs, and hold a backend against a recording.

Why: a board is a scarce thing to test on, and a host is a poor judge of a board. Recorded once
on the board (``edgefuse run BUILD_DIR --record golden.npz --backend acl``), the outputs become
goldens that host tests hold the ``sim`` backend against; recorded on the host, they are the
reference a board run is checked against (``edgefuse verify --against golden.npz BUILD_DIR
--backend acl``). The file format is ``edgefuse.reference.recording``; the comparison is
``verify``'s (``compare_outputs`` with a ``Gate``), with the FP16 gate (cosine >= 0.999) when the
recording or the backend checked carries the board's FP16 numerics, the FP32 gate otherwise.

Frames (``--frames DIR``) go through the build's own preprocessing as the apps do it
(``edgefuse.vision.model.adapter.prepare_frame``): an AIPP build gets the uint8 frame (NV12/NV21
bytes for a YUV420SP build) and the board does the rest; another model gets its preprocessing
record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edgefuse._checks import non_negative_number, number_in
from edgefuse._version import __version__
from edgefuse.errors import InputError, Ref
from edgefuse.manifest import MANIFEST_NAME
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.reference.compare import Gate, compare_outputs, degenerate_outputs
from edgefuse.reference.recording import (
    Recording,
    board_numerics,
    load_recording,
    make_recording,
)
from edgefuse.runtime import DEFAULT_BACKENDS, open_session
from edgefuse.session import Session
from edgefuse.verify import DEFAULT_FP16_MIN_COSINE, DEFAULT_MIN_COSINE, VerifyResult
from edgefuse.vision.model.adapter import plan_for_source, prepare_frame
from edgefuse.vision.streams.sources import open_source

Model = str | os.PathLike[str] | onnx.ModelProto | ModelSource


def manifest_sha256(model: Model) -> str | None:
    """The sha256 of a BUILD_DIR's ``manifest.json`` (which pins every file of the build by its
    digest); None for anything that is not a BUILD_DIR."""
    if isinstance(model, ModelSource):
        model = model.label
    if isinstance(model, onnx.ModelProto):
        return None
    path = Path(model) / MANIFEST_NAME
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_runs(session: Session, samples: Iterable[Mapping[str, np.ndarray]], *,
                model: Model | None = None, created_by: str | None = None,
                build_path: str | None = None,
                extra_meta: Mapping[str, Any] | None = None) -> Recording:
    """Run ``session`` on every sample and record the feeds and outputs (not yet saved).

    ``model``: what the session was opened on, for the build's digest and soc in the metadata;
    ``created_by``: the command that made the recording (default: this process's argv);
    ``build_path``: the build's path in the metadata (default: as given); ``extra_meta``: more
    metadata (a bundle golden's ``seed``).
    """
    pairs = [(dict(feeds), session.run(feeds)) for feeds in samples]
    source = resolve_source(model) if model is not None else None
    manifest = source.manifest if source is not None else None
    build = None
    if manifest is not None:
        build = {"path": build_path if build_path is not None else source.label,
                 "manifest_sha256": manifest_sha256(source),
                 "soc": manifest.soc}
    meta: dict[str, Any] = {
        "backend": session.backend,
        "soc": getattr(session, "soc", None),  # the board's or the simulated one; None on a host
        "build": build,
        "edgefuse_version": __version__,
        "created_by": created_by if created_by is not None else " ".join(sys.argv),
        **(extra_meta or {}),
    }
    return make_recording(pairs, meta)


def frame_samples(session: Session, model: Model, frames: Any,
                  limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """Feeds for ``session`` from ``frames`` (a folder, glob, image or video file, or anything
    ``open_source`` reads), each BGR frame prepared as the apps prepare it for this model."""
    plan = plan_for_source(session, resolve_source(model))
    samples = []
    with open_source(frames, live=False) as reader:
        for frame in reader:
            samples.append(prepare_frame(plan, frame.image)[0])
            if limit is not None and len(samples) >= limit:
                break
    if not samples:
        raise InputError(f"no frame could be read from '{frames}'", reference=Ref.BAD_SOURCE)
    return samples


def default_gate(recording: Recording, backend: str, min_cosine: float | None = None,
                 max_rel_l2: float | None = None) -> Gate:
    """The FP16 gate when the recording or ``backend`` has the board's numerics, else FP32's."""
    fp16 = board_numerics(recording, backend)
    if min_cosine is None:
        min_cosine = DEFAULT_FP16_MIN_COSINE if fp16 else DEFAULT_MIN_COSINE
    return Gate(min_cosine, max_rel_l2)


@dataclasses.dataclass
class ReplayResult:
    """A backend's outputs on a recording's inputs, against the recorded outputs."""

    recording: Recording
    backend: str
    result: VerifyResult
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.result.passed

    def render(self) -> str:
        lines = [f"against: {self.recording.describe()}", f"backend: {self.backend}"]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join([*lines, self.result.render()])

    def to_json(self) -> dict[str, Any]:
        return {"recording": self.recording.meta, "backend": self.backend, "notes": self.notes,
                **self.result.to_json()}


def replay_inputs(recording: Recording, session: Session) -> list[dict[str, np.ndarray]]:
    """``session``'s outputs on each recorded sample's inputs."""
    return [session.run(inputs) for inputs in recording.inputs]


def replay(recording: Recording | str | os.PathLike[str], session: Session, *,
           gate: Gate | None = None, model: Model | None = None) -> ReplayResult:
    """Run ``session`` on the recorded inputs and compare its outputs with the recorded ones."""
    recording = load_recording(recording)
    gate = gate or default_gate(recording, session.backend)
    produced = replay_inputs(recording, session)
    outputs = compare_outputs(recording.outputs, produced, gate)
    result = VerifyResult(outputs, gate.min_cosine, gate.max_rel_l2, None,
                          samples=len(produced), degenerate=degenerate_outputs(recording.outputs))
    notes = []
    recorded, here = recording.build_sha256, manifest_sha256(model) if model is not None else None
    if recorded and here and recorded != here:
        notes.append(f"the recording was made on another build (manifest sha256 "
                     f"{recorded[:12]}..., this one {here[:12]}...): differences may be the "
                     "build's, not the backend's")
    return ReplayResult(recording, session.backend, result, notes)


def check_against(recording: Recording | str | os.PathLike[str], model: Model,
                  backends: str | Sequence[str] = DEFAULT_BACKENDS, *, strict: bool = False,
                  min_cosine: float | None = None, max_rel_l2: float | None = None,
                  **options: Any) -> ReplayResult:
    """Open ``model`` on ``backends`` (``open_session``'s rules and ``options``) and replay the
    recording on it."""
    if min_cosine is not None:
        min_cosine = number_in("min_cosine", min_cosine, -1.0, 1.0)
    if max_rel_l2 is not None:
        max_rel_l2 = non_negative_number("max_rel_l2", max_rel_l2)
    recording = load_recording(recording)
    source = resolve_source(model)
    with open_session(source, backends, strict=strict, **options) as session:
        gate = default_gate(recording, session.backend, min_cosine, max_rel_l2)
        return replay(recording, session, gate=gate, model=source)
