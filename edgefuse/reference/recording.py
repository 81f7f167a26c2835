"""A recording of a model run: the inputs a session was fed and the outputs it gave, in one .npz.

Why: the board and the host check each other through files. ``edgefuse run BUILD_DIR --record
OUT.npz`` on a board makes goldens that host tests hold the ``sim`` backend against; on a host it
makes the reference a board run is checked against (``edgefuse verify --against OUT.npz``). So
the file carries what makes a comparison meaningful: which backend and soc produced the outputs,
which build (the sha256 of its ``manifest.json``, which pins every file of the build by digest),
which edgefuse and which command.

Format ``edgefuse-recording/1``, a plain ``numpy.savez`` file (no pickles)::

    input/<sample>/<name>    the array fed to input <name> in sample <sample> (0, 1, ...)
    output/<sample>/<name>   the array output <name> gave
    meta                     JSON text: {"format", "backend", "soc", "build": {"path",
                             "manifest_sha256", "soc"} | null, "edgefuse_version", "created_by",
                             "samples", "inputs", "outputs"}, plus "seed" in a bundle's golden
                             and "converted_from" in one read from the old golden pair

The sample index comes before the name, so tensor names holding ``/`` survive. Loading checks the
format, every sample's names against ``meta`` and refuses pickled arrays. The same file is a
bundle's golden (``models/<name>/golden.npz``, written with fixed zip times by
``edgefuse.bundle.golden``; its meta adds the ``seed`` of its inputs).

Bundles built before this format carry ``golden.npz`` (``input/<name>``, ``output/<name>``, one
sample, no ``meta``) with a JSON twin ``golden.json`` (``"format": "edgefuse-golden/1"``, backend,
soc, the build's manifest sha256, edgefuse version, seed): ``load_recording`` reads that pair as a
one-sample recording, so an installed bundle still verifies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._files import atomic_output
from edgefuse.errors import InputError, Ref

FORMAT = "edgefuse-recording/1"
META_KEY = "meta"
# The bundle golden's format before the recording took its place: an .npz and a JSON twin.
LEGACY_GOLDEN_FORMAT = "edgefuse-golden/1"
# Backends whose outputs carry the board's FP16 numerics: a comparison with them takes the FP16
# gate.
BOARD_NUMERICS = frozenset({"acl", "sim"})


@dataclasses.dataclass(frozen=True)
class Sample:
    """One run: input name -> array fed, output name -> array returned."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Recording:
    """Samples of a session's runs and where they come from (``meta``)."""

    samples: tuple[Sample, ...]
    meta: dict[str, Any]

    @property
    def backend(self) -> str | None:
        return self.meta.get("backend")

    @property
    def soc(self) -> str | None:
        return self.meta.get("soc")

    @property
    def build_sha256(self) -> str | None:
        build = self.meta.get("build") or {}
        return build.get("manifest_sha256")

    @property
    def board_numerics(self) -> bool:
        """Whether the outputs carry FP16 numerics: a board or sim run, or FP16 outputs."""
        return self.backend in BOARD_NUMERICS or any(
            array.dtype == np.float16 for sample in self.samples
            for array in sample.outputs.values())

    @property
    def inputs(self) -> list[dict[str, np.ndarray]]:
        return [sample.inputs for sample in self.samples]

    @property
    def outputs(self) -> list[dict[str, np.ndarray]]:
        return [sample.outputs for sample in self.samples]

    def describe(self) -> str:
        """``3 sample(s) recorded on sim (Ascend310B4), build 1a2b3c4d..., edgefuse 0.1.0``."""
        where = f" ({self.soc})" if self.soc else ""
        build = f", build {self.build_sha256[:12]}" if self.build_sha256 else ""
        return (f"{len(self.samples)} sample(s) recorded on {self.backend}{where}{build}, "
                f"edgefuse {self.meta.get('edgefuse_version')}")

    def arrays(self) -> dict[str, np.ndarray]:
        """The .npz entries: ``meta`` and every sample's ``input/<i>/<name>``,
        ``output/<i>/<name>`` (for writers that fix the zip's bytes, like a bundle's golden)."""
        arrays: dict[str, np.ndarray] = {META_KEY: np.array(json.dumps(self.meta, indent=1))}
        for index, sample in enumerate(self.samples):
            arrays.update({f"input/{index}/{n}": np.asarray(a) for n, a in sample.inputs.items()})
            arrays.update({f"output/{index}/{n}": np.asarray(a)
                           for n, a in sample.outputs.items()})
        return arrays

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the .npz atomically (nothing half-written on failure)."""
        with atomic_output(path, suffix=".npz") as tmp:
            np.savez(tmp, **self.arrays())


def board_numerics(recording: Recording, backend: str) -> bool:
    """Whether a replay of ``recording`` on ``backend`` compares FP16 numerics on either side:
    the gate every replay (``verify --against``, the pytest kit) takes from it."""
    return recording.board_numerics or backend in BOARD_NUMERICS


def make_recording(samples: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]],
                   meta: Mapping[str, Any]) -> Recording:
    """A recording of (inputs, outputs) pairs; ``meta`` gets the format, counts and names."""
    if not samples:
        raise InputError("a recording needs at least one sample", reference=Ref.BAD_RECORDING)
    pairs = tuple(Sample({n: np.asarray(a) for n, a in inputs.items()},
                         {n: np.asarray(a) for n, a in outputs.items()})
                  for inputs, outputs in samples)
    full = {**meta, "format": FORMAT, "samples": len(pairs),
            "inputs": list(pairs[0].inputs), "outputs": list(pairs[0].outputs)}
    return Recording(pairs, full)


def load_recording(path: str | os.PathLike[str] | Recording) -> Recording:
    """Read a recording written by ``Recording.save`` (``edgefuse run --record``)."""
    if isinstance(path, Recording):
        return path
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):  # an .npy: an array, no context manager
            raise ValueError("it holds a single array (an .npy), not a recording")
        with data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError as exc:
        raise InputError(f"no such recording: '{path}'", reference=Ref.FILE_NOT_FOUND) from exc
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise _bad(path, f"it is not a readable .npz ({exc})") from exc
    if META_KEY not in arrays:
        legacy = _legacy_golden_record(path)
        if legacy is not None:
            return _legacy_golden(path, arrays, legacy)
        raise _bad(path, f"it has no '{META_KEY}' entry (an .npz of inputs, not a recording?)")
    try:
        meta = json.loads(str(arrays.pop(META_KEY)))
    except json.JSONDecodeError as exc:
        raise _bad(path, f"its '{META_KEY}' entry is not JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise _bad(path, f"its format is {found!r}, this edgefuse reads {FORMAT!r}")
    _check_meta_types(path, meta)
    count = meta.get("samples")
    if not isinstance(count, int) or count < 1:
        raise _bad(path, f"'samples' in its meta is {count!r}")
    names = {kind: meta.get(f"{kind}s") for kind in ("input", "output")}
    if not all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in names.values()):
        raise _bad(path, "its meta does not list the input and output names")
    samples = []
    for index in range(count):
        found = {kind: _sample_arrays(arrays, f"{kind}/{index}/") for kind in names}
        if any(set(found[kind]) != set(names[kind]) for kind in names):
            raise _bad(path, f"sample {index} does not hold the inputs {names['input']} and "
                             f"outputs {names['output']} its meta lists")
        samples.append(Sample(*({n: found[kind][n] for n in names[kind]} for kind in names)))
    return Recording(tuple(samples), meta)


def _legacy_golden_record(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``edgefuse-golden/1`` JSON twin of ``path`` (same stem, ``.json``), if there is one."""
    twin = Path(path).with_suffix(".json")
    try:
        record = json.loads(twin.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # no twin, or a file of someone else's next to an .npz: not a golden
    except OSError as exc:
        raise _bad(path, f"its twin {twin.name} cannot be read ({exc})") from exc
    if not isinstance(record, dict) or record.get("format") != LEGACY_GOLDEN_FORMAT:
        return None
    return record


def _legacy_golden(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
                   record: dict[str, Any]) -> Recording:
    """A one-sample recording from a bundle golden written before ``FORMAT`` (see the module
    docstring); its meta says what it was converted from."""
    names = {kind: record.get(f"{kind}s") for kind in ("input", "output")}
    if not all(isinstance(v, dict) for v in names.values()):
        raise _bad(path, f"its {LEGACY_GOLDEN_FORMAT} twin does not list inputs and outputs")
    found = {kind: _sample_arrays(arrays, f"{kind}/") for kind in names}
    if any(set(found[kind]) != set(names[kind]) for kind in names):
        raise _bad(path, f"it does not hold the inputs {sorted(names['input'])} and outputs "
                         f"{sorted(names['output'])} its {LEGACY_GOLDEN_FORMAT} twin lists")
    sample = Sample(*({n: found[kind][n] for n in names[kind]} for kind in names))
    digest = record.get("build")
    meta = {"format": FORMAT, "converted_from": LEGACY_GOLDEN_FORMAT,
            "backend": record.get("backend"), "soc": record.get("soc"),
            "build": {"path": None, "manifest_sha256": digest, "soc": record.get("soc")}
            if isinstance(digest, str) else None,
            "edgefuse_version": record.get("edgefuse_version"), "created_by": "edgefuse build",
            "seed": record.get("seed"), "samples": 1,
            "inputs": list(sample.inputs), "outputs": list(sample.outputs)}
    return Recording((sample,), meta)


def _check_meta_types(path: str | os.PathLike[str], meta: Mapping[str, Any]) -> None:
    """The meta keys a replay reads are text (or null), ``build`` an object of text: a hand-edited
    or foreign recording is refused here, not by an AttributeError in a replay."""
    build = meta.get("build")
    if build is not None and not isinstance(build, dict):
        raise _bad(path, f"'build' in its meta is {build!r}, not an object")
    fields = {key: meta.get(key) for key in ("backend", "soc", "edgefuse_version", "created_by")}
    fields.update({f"build.{key}": value for key, value in (build or {}).items()})
    wrong = [key for key, value in fields.items() if not isinstance(value, (str, type(None)))]
    if wrong:
        raise _bad(path, f"{', '.join(wrong)} in its meta must be text, got "
                         f"{', '.join(repr(fields[key]) for key in wrong)}")


def _sample_arrays(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {name[len(prefix):]: array for name, array in arrays.items()
            if name.startswith(prefix)}


def _bad(path: str | os.PathLike[str], why: str) -> InputError:
    return InputError(f"'{path}' is not an edgefuse recording: {why}",
                      hint="record one with `edgefuse run BUILD_DIR --record OUT.npz`",
                      reference=Ref.BAD_RECORDING)
