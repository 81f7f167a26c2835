"""Golden recordings: a model's inputs and outputs on a reference backend, checked on the board.

Why: a bundle copied to a board can be intact byte for byte and still run wrongly there (a
different CANN, a driver, an op package missing). ``record_golden`` runs the compiled BUILD_DIR
once at build time and stores what it saw; ``check_golden`` runs the same inputs on the best
backend the board offers and reports the agreement. The recording is deliberately plain: an .npz
with ``input/<name>`` and ``output/<name>`` arrays (deterministic bytes, see ``reproducible``)
and a JSON with the backend, the soc, the digest of the build's manifest and the edgefuse
version. It records on the host backend named by the caller: ``sim`` where edgefuse knows the
board (the OM's I/O and FP16 numerics, and a model too large for the board fails the build), else
``cpu``. A build with
edgefuse custom ops is run on the host through the model before compile (``host_onnx``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._files import write_text
from edgefuse._version import __version__
from edgefuse.bundle.reproducible import save_npz
from edgefuse.errors import InputError, Ref
from edgefuse.manifest import MANIFEST_NAME, file_sha256, read_manifest
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.reference.compare import Gate, OutputAgreement, compare_outputs
from edgefuse.reference.feeds import feed_set
from edgefuse.runtime import open_session

GOLDEN_FORMAT = "edgefuse-golden/1"
GOLDEN_NPZ, GOLDEN_JSON = "golden.npz", "golden.json"
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
                  host_onnx: Path | None = None) -> dict[str, Any]:
    """Run ``build_dir`` on ``backend`` with seeded inputs; write ``out_path`` (.npz) and its
    JSON twin (same stem, ``.json``); returns the JSON record. ``host_onnx``: see ``_source``."""
    build = Path(build_dir)
    manifest = read_manifest(build)
    source = _source(build, host_onnx)
    with open_session(source, backends=(backend,), strict=True, threads=1,
                      **_sim_options(source)) as session:
        feeds = feed_set(session.inputs, None, seed=seed)[0]
        outputs = session.run(feeds)
        used = session.backend
    arrays = {**{f"input/{k}": v for k, v in feeds.items()},
              **{f"output/{k}": v for k, v in outputs.items()}}
    out = Path(out_path)
    save_npz(out, arrays, epoch)
    record = {
        "format": GOLDEN_FORMAT,
        "backend": used,
        "soc": manifest.soc,
        "build": file_sha256(build / MANIFEST_NAME),
        "edgefuse_version": __version__,
        "seed": seed,
        "inputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in feeds.items()},
        "outputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name}
                    for k, v in outputs.items()},
    }
    write_text(out.with_suffix(".json"), json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


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


def load_golden(npz_path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    """(inputs, outputs, record) of a recording."""
    record_path = npz_path.with_suffix(".json")
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        with np.load(npz_path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the golden recording {npz_path}: {exc}",
                         reference=Ref.BAD_BUNDLE) from exc
    if record.get("format") != GOLDEN_FORMAT:
        raise InputError(f"{record_path} is not an {GOLDEN_FORMAT} record",
                         reference=Ref.BAD_BUNDLE)
    inputs = {k.removeprefix("input/"): v for k, v in arrays.items() if k.startswith("input/")}
    outputs = {k.removeprefix("output/"): v for k, v in arrays.items()
               if k.startswith("output/")}
    return inputs, outputs, record


def check_golden(build_dir: Path, npz_path: Path, backends: Sequence[str],
                 board_min_cosine: float, host_onnx: Path | None = None) -> GoldenCheck:
    """Run the recorded inputs on the first of ``backends`` that runs here; compare outputs.

    The gate is ``SAME_BACKEND_MIN_COSINE`` on the recording's backend, ``board_min_cosine``
    (the model's FP16 gate) on any other."""
    inputs, expected, record = load_golden(npz_path)
    source = _source(build_dir, host_onnx)
    with open_session(source, backends=tuple(backends), threads=1,
                      **_sim_options(source)) as session:
        actual = session.run(inputs)
        used = session.backend
    minimum = SAME_BACKEND_MIN_COSINE if used == record["backend"] else board_min_cosine
    outputs = compare_outputs([expected], [actual], Gate(minimum))
    return GoldenCheck(used, record["backend"], outputs, minimum)
