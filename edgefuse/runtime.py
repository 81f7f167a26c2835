"""One Session API over every backend, and ``open_session``, which picks the backend visibly.

Why: users write their app once and run it on the board (pyACL), on a GPU workstation and on a
laptop (ONNX Runtime). ONNX Runtime's own provider fallback is its users' loudest complaint
(microsoft/onnxruntime#23372, #17801, #17394): a GPU session quietly runs on the CPU. Here the
order is an explicit list, every skipped backend is recorded with the reason (``session.skipped``)
and logged once at WARNING, ``session.backend`` says which one runs, and a session never changes
backend after it is open: a failure inside ``run`` is raised, not retried elsewhere.

``Session`` is a template method (Polygraphy's runners): the public ``run`` validates the feeds'
names, dtypes and shapes against ``inputs`` and then calls the backend's ``_run``. Benchmarks open
sessions with ``validate=False`` to take the check out of the hot path.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edgefuse.errors import BackendUnavailableError, EdgefuseError, InputError
from edgefuse.manifest import BuildManifest, read_manifest, resolve

log = logging.getLogger(__name__)

# Every backend open_session knows, fastest first. "tensorrt" is opt-in: it needs a TensorRT
# install next to onnxruntime-gpu and builds engines on first use, which takes minutes.
BACKENDS: tuple[str, ...] = ("acl", "tensorrt", "cuda", "cpu")
DEFAULT_BACKENDS: tuple[str, ...] = ("acl", "cuda", "cpu")
# Where a non-strict open ends up when nothing it listed can run.
LAST_RESORT = "cpu"

# Options each backend understands; anything else passed to open_session is a typo.
_COMMON_OPTIONS = frozenset({"validate"})
_BACKEND_OPTIONS: dict[str, frozenset[str]] = {
    "acl": frozenset({"device_id", "execute"}),
    **dict.fromkeys(
        ("tensorrt", "cuda", "cpu"),
        frozenset({"device_id", "threads", "inter_op_threads", "optimization", "mem_pattern",
                   "cpu_arena", "allow_cpu_nodes", "provider_options"}),
    ),
}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A model input or output: name, shape (ints fixed, str/None dynamic) and numpy dtype."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: np.dtype

    def signature(self) -> str:
        """``float32[1,3,224,224]``; dynamic dimensions show their name or ``?``."""
        dims = ",".join(str(d) if isinstance(d, int) else (d or "?") for d in self.shape)
        return f"{self.dtype.name}[{dims}]"

    def describe(self) -> str:
        return f"{self.name}: {self.signature()}"

    def fixed_dims(self) -> tuple[tuple[int, int], ...]:
        """(axis, size) for every dimension the model fixes."""
        return tuple((axis, d) for axis, d in enumerate(self.shape) if isinstance(d, int))


@dataclasses.dataclass(frozen=True)
class Availability:
    """What ``probe`` found: whether a backend can run here (and this model), and why (not)."""

    ok: bool
    reason: str


class Session:
    """A model ready to run on one backend. Thread-safe: backends serialise ``run`` where needed.

    Use it as a context manager or call ``close()``; a closed session refuses to run.
    """

    backend: str = "session"

    def __init__(
        self,
        inputs: Iterable[TensorSpec],
        outputs: Iterable[TensorSpec],
        *,
        validate: bool = True,
    ) -> None:
        self.inputs: tuple[TensorSpec, ...] = tuple(inputs)
        self.outputs: tuple[TensorSpec, ...] = tuple(outputs)
        self.validate = validate
        self.skipped: dict[str, str] = {}
        self._closed = False
        self._close_lock = threading.Lock()
        # Precomputed once so that validation costs a few microseconds per call.
        self._checks = tuple(
            (spec.name, len(spec.shape), spec.fixed_dims(), spec.dtype, spec)
            for spec in self.inputs
        )
        self._input_names = frozenset(spec.name for spec in self.inputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model on ``feeds`` (input name -> array); returns output name -> array."""
        if self._closed:
            raise EdgefuseError(
                f"this {self.backend} session is closed",
                hint="open a new session with edgefuse.open_session()",
                reference="session-closed",
            )
        if self.validate:
            self._check_feeds(feeds)
        return self._run(feeds)

    def close(self) -> None:
        """Release the backend's resources; calling it again does nothing."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<{type(self).__name__} backend={self.backend} {state} "
                f"inputs=[{'; '.join(s.describe() for s in self.inputs)}]>")

    # --- for backends -------------------------------------------------------------------------

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _close(self) -> None:
        """Free what the backend holds; called once."""

    # --- validation ---------------------------------------------------------------------------

    def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> None:
        if not isinstance(feeds, Mapping):
            raise InputError(
                f"feeds must be a dict of input name -> numpy array, got {type(feeds).__name__}",
                context=self._expected(),
                reference="bad-feeds",
            )
        if feeds.keys() != self._input_names:
            self._raise_names(feeds)
        for name, ndim, fixed, dtype, spec in self._checks:
            value = feeds[name]
            if not isinstance(value, np.ndarray):
                raise InputError(
                    f"input '{name}' must be a numpy array, got {type(value).__name__}",
                    context=f"expected {spec.describe()}",
                    hint="wrap it with numpy.asarray(value, dtype=...)",
                    reference="bad-feeds",
                )
            shape = value.shape
            if value.dtype != dtype or len(shape) != ndim or any(
                shape[axis] != size for axis, size in fixed
            ):
                raise self._mismatch(spec, value)

    def _raise_names(self, feeds: Mapping[str, Any]) -> None:
        missing = sorted(self._input_names - feeds.keys())
        unknown = sorted(str(k) for k in feeds.keys() - self._input_names)
        problems = []
        if missing:
            problems.append("missing input(s) " + ", ".join(f"'{n}'" for n in missing))
        if unknown:
            problems.append("unknown input(s) " + ", ".join(f"'{n}'" for n in unknown))
        raise InputError(
            "; ".join(problems),
            context=self._expected(),
            hint="feed exactly the inputs listed above, by name",
            reference="bad-feeds",
        )

    def _mismatch(self, spec: TensorSpec, value: np.ndarray) -> InputError:
        given = f"{value.dtype.name}[{','.join(str(d) for d in value.shape)}]"
        hint = None
        if value.dtype != spec.dtype:
            hint = f"convert it with array.astype(numpy.{spec.dtype.name})"
        elif len(value.shape) != len(spec.shape):
            hint = f"the model takes a {len(spec.shape)}-d array (batch dimension included?)"
        return InputError(
            f"input '{spec.name}' expects {spec.signature()}, got {given}",
            context=self._expected(),
            hint=hint,
            reference="bad-feeds",
        )

    def _expected(self) -> str:
        return "the model takes: " + "; ".join(spec.describe() for spec in self.inputs)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What ``open_session`` was given, resolved to the files each backend needs."""

    label: str
    onnx: Path | onnx.ModelProto | None
    om: Path | None
    manifest: BuildManifest | None


def resolve_source(model: str | os.PathLike[str] | onnx.ModelProto | ModelSource) -> ModelSource:
    """A BUILD_DIR (manifest.json), an .onnx file, an .om file or an in-memory ModelProto."""
    if isinstance(model, ModelSource):
        return model
    if isinstance(model, onnx.ModelProto):
        return ModelSource(model.graph.name or "<in-memory model>", model, None, None)
    path = Path(model)
    if path.is_dir():
        manifest = read_manifest(path)
        om = resolve(path, manifest.om) if manifest.om else None
        return ModelSource(str(path), resolve(path, manifest.model), om, manifest)
    if not path.is_file():
        raise InputError(
            f"'{path}' does not exist",
            hint="pass a BUILD_DIR written by `edgefuse compile`, an .onnx file or an .om file",
            reference="model-not-found",
        )
    if path.suffix.lower() == ".om":
        return ModelSource(str(path), None, path, None)
    return ModelSource(str(path), path, None, None)


def probe(backend: str, model: Any = None) -> Availability:
    """Whether ``backend`` can run here, and when ``model`` is given, whether it can run it."""
    _check_backend_names((backend,))
    source = resolve_source(model) if model is not None else None
    if backend == "acl":
        from edgefuse.acl.session import probe_acl

        return probe_acl(source)
    from edgefuse.fallback.ort_session import probe_provider

    found = probe_provider(backend)
    if not found.ok or source is None:
        return found
    if source.onnx is None:
        return Availability(False, f"{source.label} is an OM only; ONNX Runtime needs the "
                                   "host ONNX that `edgefuse compile` writes next to it")
    return found


def open_session(
    model_or_build_dir: str | os.PathLike[str] | onnx.ModelProto | ModelSource,
    backends: str | Iterable[str] = DEFAULT_BACKENDS,
    strict: bool = False,
    **options: Any,
) -> Session:
    """Open the model on the first backend in ``backends`` that can run it here.

    Every backend passed over is recorded in ``session.skipped`` (name -> reason) and logged once
    at WARNING. With ``strict=True``, or when a single backend is named, nothing outside the list
    is tried and "none available" raises ``BackendUnavailableError`` listing every reason;
    otherwise ONNX Runtime on the CPU is the last resort. ``options`` go to the backend that
    opens: ``validate`` (all), ``device_id``, ``execute`` ("sync"|"async", acl), ``threads``,
    ``inter_op_threads``, ``optimization``, ``mem_pattern``, ``cpu_arena``, ``allow_cpu_nodes``,
    ``provider_options`` (ONNX Runtime backends).
    """
    order = (backends,) if isinstance(backends, str) else tuple(backends)
    if not order:
        raise InputError("backends is empty", hint=f"name some of {', '.join(BACKENDS)}",
                         reference="unknown-backend")
    _check_backend_names(order)
    _check_options(options)
    strict = strict or len(order) == 1
    if not strict and LAST_RESORT not in order:
        order = (*order, LAST_RESORT)
    source = resolve_source(model_or_build_dir)
    skipped: dict[str, str] = {}
    for name in order:
        found = probe(name, source)
        if not found.ok:
            skipped[name] = found.reason
            continue
        try:
            session = _open(name, source, options)
        except BackendUnavailableError as exc:
            skipped[name] = exc.message
            continue
        session.skipped = skipped
        if skipped:
            _warn_once(
                f"{source.label}: running on '{name}'; skipped "
                + "; ".join(f"{b}: {r}" for b, r in skipped.items())
            )
        return session
    raise BackendUnavailableError(
        f"no backend in ({', '.join(order)}) can run {source.label} here",
        context="\n".join(f"{name}: {reason}" for name, reason in skipped.items()),
        hint="`edgefuse doctor` shows what each backend needs",
    )


def _open(name: str, source: ModelSource, options: dict[str, Any]) -> Session:
    mine = {k: v for k, v in options.items() if k in _BACKEND_OPTIONS[name] | _COMMON_OPTIONS}
    if name == "acl":
        from edgefuse.acl.session import AclSession

        return AclSession(source.om, manifest=source.manifest, **mine)
    from edgefuse.fallback.aipp_frames import AippFrameSession, wants_frames
    from edgefuse.fallback.ort_session import OrtSession

    session = OrtSession(source.onnx, provider=name, **mine)
    if not wants_frames(source.manifest):
        return session
    try:  # the board's OM takes camera frames (AIPP): so does the host session
        return AippFrameSession(session, source.manifest, validate=mine.get("validate", True))
    except BaseException:
        session.close()
        raise


def _check_backend_names(names: Iterable[str]) -> None:
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise InputError(
            f"unknown backend(s): {', '.join(map(repr, unknown))}",
            hint=f"known backends: {', '.join(BACKENDS)}",
            reference="unknown-backend",
        )


def _check_options(options: Mapping[str, Any]) -> None:
    known = _COMMON_OPTIONS.union(*_BACKEND_OPTIONS.values())
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(
            f"unknown session option(s): {', '.join(unknown)}",
            hint=f"known options: {', '.join(sorted(known))}",
            reference="unknown-session-option",
        )


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(message: str) -> None:
    """Log a fallback once per process: an app that opens a session per frame must not spam."""
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    log.warning(message)
