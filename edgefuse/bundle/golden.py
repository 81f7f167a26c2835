"""A bundle's golden: a recording of the compiled build on a host backend, checked on the board.

Why: a bundle copied to a board can be intact byte for byte and still run wrongly there (a
different CANN, a driver, an op package missing). ``record_golden`` runs the compiled BUILD_DIR
once at build time and stores what it saw; ``check_golden`` replays the same inputs on the best
backend the board offers and reports the agreement. The file is an ordinary recording
(``edgefuse.reference.recording``, the format ``edgefuse run --record`` writes, so ``edgefuse
verify --against models/<name>/golden.npz`` and the pytest kit read it too), written with fixed zip
times (see ``reproducible``) and a meta that names no build-host path. It records on the host
backend named by the caller: ``sim`` where edgefuse knows the board (the OM's I/O and FP16
numerics, and a model too large for the board fails the build), else ``cpu``. A build with
edgefuse custom ops is run on the host through the model before compile (``host_onnx``). Its
input is seeded random, except for an INT8 build: a real frame of its calibration source, so the
board's INT8 is judged on what it was calibrated for (``record_golden``).
Bundles built before carry ``golden.npz`` + ``golden.json`` (``edgefuse-golden/1``), which
``load_recording`` still reads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse.bundle.reproducible import save_npz
from edgefuse.goldens import frame_samples, record_runs, replay
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.reference.compare import Gate, OutputAgreement
from edgefuse.reference.feeds import feed_set
from edgefuse.reference.recording import load_recording
from edgefuse.runtime import open_session
from edgefuse.session import Session

GOLDEN_NPZ = "golden.npz"
# The build's path in a golden's meta: the BUILD_DIR next to it in the model's bundle folder
# (never the build host's scratch folder, so that equal builds give equal bytes).
GOLDEN_BUILD_PATH = "."
# The same host backend reproduces its own recording to rounding; the board's FP16 OM does not.
SAME_BACKEND_MIN_COSINE = 0.99999


def _source(build: Path, host_onnx: Path | None) -> ModelSource:
    """The build, with ``host_onnx`` as the model host backends run when given: a build with
    edgefuse custom ops keeps them in ATC's spelling, which ONNX Runtime cannot load, while the
    model before compile carries their decompositions."""
    source = resolve_source(build)
    return dataclasses.replace(source, onnx=host_onnx) if host_onnx is not None else source


def _sim_options(source: ModelSource) -> dict[str, Any]:
    """``sim`` simulates the build's own soc (other backends ignore the option)."""
    soc = source.manifest.soc if source.manifest is not None else None
    return {"soc": soc} if soc else {}


def record_golden(build_dir: str | os.PathLike[str], out_path: str | os.PathLike[str],
                  backend: str = "cpu", *, seed: int = 0, epoch: int = 0,
                  host_onnx: Path | None = None, frames: Path | None = None,
                  frames_text: str | None = None) -> dict[str, Any]:
    """Run ``build_dir`` on ``backend`` and write the recording to ``out_path`` (.npz, zip
    times ``epoch``); returns its meta. ``host_onnx``: see ``_source``.

    The input is seeded random (``seed``), or with ``frames`` (an INT8 build's calibration
    source; ``frames_text``: as the spec writes it, for the meta) the first real frame of it,
    prepared as the apps prepare it (``frame_samples``: through the build's AIPP where it has
    one), or its first .npz sample. Why: an INT8 model is calibrated on real frames and judged
    against the golden with ``int8_min_cosine``; on noise its activations leave the calibrated
    ranges and the board would fail the gate for no fault of its own."""
    source = _source(Path(build_dir), host_onnx)
    with open_session(source, backends=(backend,), strict=True, threads=1,
                      **_sim_options(source)) as session:
        feeds, meta = _feeds(session, source, seed, frames, frames_text or str(frames))
        recording = record_runs(session, [feeds], model=source, created_by="edgefuse build",
                                build_path=GOLDEN_BUILD_PATH, extra_meta=meta)
    save_npz(Path(out_path), recording.arrays(), epoch)
    return recording.meta


def _feeds(session: Session, source: ModelSource, seed: int, frames: Path | None,
           frames_text: str) -> tuple[Mapping[str, np.ndarray], dict[str, Any]]:
    """The golden's one sample and what the meta says of it (see ``record_golden``)."""
    if frames is None:
        return feed_set(session.inputs, None, seed=seed)[0], {"seed": seed}
    if not _holds_npz(frames):
        said = (f"the first frame of {frames_text} (the INT8 calibration frames), prepared as "
                "the apps prepare it")
        return frame_samples(session, source, frames, limit=1)[0], {"golden_inputs": said}
    if source.manifest is not None and source.manifest.preprocess is not None:
        said = (f"seeded random: the calibration samples of {frames_text} are .npz tensors of "
                "the model's input, not the frame the build's AIPP takes")
        return feed_set(session.inputs, None, seed=seed)[0], {"seed": seed, "golden_inputs": said}
    said = f"the first sample of {frames_text} (the INT8 calibration .npz files)"
    return feed_set(session.inputs, frames)[0], {"golden_inputs": said}


def _holds_npz(path: Path) -> bool:
    """``feed_set``'s rule: a .npz file, or a folder with .npz files in it, holds tensors."""
    return path.suffix.lower() == ".npz" or (path.is_dir() and any(path.glob("*.npz")))


@dataclasses.dataclass(frozen=True)
class GoldenCheck:
    """One model run against its recording."""

    backend: str
    recorded_on: str
    outputs: list[OutputAgreement]
    min_cosine: float

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "recorded_on": self.recorded_on,
                "min_cosine": self.min_cosine, "passed": self.passed,
                "outputs": [o.to_json() for o in self.outputs]}


def check_golden(build_dir: Path, npz_path: Path, backends: Sequence[str],
                 board_min_cosine: float, host_onnx: Path | None = None) -> GoldenCheck:
    """Replay the recorded inputs on the first of ``backends`` that runs here.

    The gate is ``SAME_BACKEND_MIN_COSINE`` on the recording's backend, ``board_min_cosine``
    (the model's FP16 gate) on any other."""
    recording = load_recording(npz_path)
    source = _source(build_dir, host_onnx)
    with open_session(source, backends=tuple(backends), threads=1,
                      **_sim_options(source)) as session:
        minimum = (SAME_BACKEND_MIN_COSINE if session.backend == recording.backend
                   else board_min_cosine)
        replayed = replay(recording, session, gate=Gate(minimum), model=source)
    return GoldenCheck(replayed.backend, str(recording.backend), replayed.result.outputs,
                       minimum)
