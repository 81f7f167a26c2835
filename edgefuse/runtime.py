"""``open_session``: the backend table, and the choice of a backend made visibly.

Why: users write their app once and run it on the board (pyACL), on a GPU workstation and on a
laptop (ONNX Runtime). ONNX Runtime's own provider fallback is its users' loudest complaint
(microsoft/onnxruntime#23372, #17801, #17394): a GPU session quietly runs on the CPU. Here the
order is an explicit list, every skipped backend is recorded with the reason (``session.skipped``)
and logged once at WARNING, ``session.backend`` says which one runs, and a session never changes
backend after it is open: a failure inside ``run`` is raised, not retried elsewhere.

Each backend is one row of ``BACKEND_TABLE``: how to probe it (can it run here, and this model?),
how to open it, and the options it takes. The Session base class and the tensor specs live in
``edgefuse.session``, which imports no backend.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import onnx

from edgefuse._checks import integer_at_least
from edgefuse.acl.session import AclSession, probe_acl
from edgefuse.errors import BackendUnavailableError, InputError, Ref
from edgefuse.fallback.aipp_frames import AippFrameSession, wants_frames
from edgefuse.fallback.ort_session import OrtSession, probe_provider
from edgefuse.fallback.sim_session import SIM_OPTIONS, SimSession, probe_sim
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.session import Availability, Session

log = logging.getLogger(__name__)

# Where a non-strict open ends up when nothing it listed can run.
LAST_RESORT = "cpu"
# Options every backend takes.
_COMMON_OPTIONS = frozenset({"validate"})
_ORT_OPTIONS = frozenset({"device_id", "threads", "inter_op_threads", "optimization",
                          "mem_pattern", "cpu_arena", "allow_cpu_nodes", "provider_options",
                          "profile"})


@dataclasses.dataclass(frozen=True)
class Backend:
    """One row of the backend table."""

    name: str
    probe: Callable[[ModelSource | None], Availability]
    open: Callable[[ModelSource, dict[str, Any]], Session]
    options: frozenset[str]


def _probe_host(provider: str) -> Callable[[ModelSource | None], Availability]:
    def probe_host(source: ModelSource | None) -> Availability:
        found = probe_provider(provider)
        if not found.ok or source is None:
            return found
        if source.onnx is None:
            return Availability(False, f"{source.label} is an OM only; ONNX Runtime needs the "
                                       "host ONNX that `edgefuse compile` writes next to it")
        return found

    return probe_host


def _open_host(provider: str) -> Callable[[ModelSource, dict[str, Any]], Session]:
    def open_host(source: ModelSource, options: dict[str, Any]) -> Session:
        session = OrtSession(source.onnx, provider=provider, **options)
        if not wants_frames(source.manifest):
            return session
        try:  # the board's OM takes camera frames (AIPP): so does the host session
            return AippFrameSession(session, source.manifest,
                                    validate=options.get("validate", True))
        except BaseException:
            session.close()
            raise

    return open_host


def _open_acl(source: ModelSource, options: dict[str, Any]) -> Session:
    return AclSession(source.om, manifest=source.manifest, **options)


def _open_sim(source: ModelSource, options: dict[str, Any]) -> Session:
    return SimSession(source, **options)


# Every backend open_session knows, fastest first. "tensorrt" is opt-in: it needs a TensorRT
# install next to onnxruntime-gpu and builds engines on first use, which takes minutes. "sim"
# (the board's contract simulated on the host, for tests) is opt-in too: it is never in the
# default order and never the last resort, so nothing runs on it unless it is asked for.
BACKEND_TABLE: dict[str, Backend] = {
    "acl": Backend("acl", probe_acl, _open_acl, frozenset({"device_id", "execute"})),
    **{name: Backend(name, _probe_host(name), _open_host(name), _ORT_OPTIONS)
       for name in ("tensorrt", "cuda", "cpu")},
    "sim": Backend("sim", probe_sim, _open_sim, SIM_OPTIONS),
}
BACKENDS: tuple[str, ...] = tuple(BACKEND_TABLE)
DEFAULT_BACKENDS: tuple[str, ...] = ("acl", "cuda", "cpu")


def probe(backend: str, model: Any = None) -> Availability:
    """Whether ``backend`` can run here, and when ``model`` is given, whether it can run it."""
    _check_backend_names((backend,))
    source = resolve_source(model) if model is not None else None
    return BACKEND_TABLE[backend].probe(source)


def open_session(
    model_or_build_dir: str | os.PathLike[str] | onnx.ModelProto | ModelSource,
    backends: str | Iterable[str] = DEFAULT_BACKENDS,
    strict: bool = False,
    **options: Any,
) -> Session:
    """Open the model on the first backend in ``backends`` that can run it here.

    Every backend passed over is recorded in ``session.skipped`` (name -> reason) and logged once
    at WARNING: in one line for backends this host lacks (``edgefuse doctor`` explains them),
    with the reason for one that is here and refused the model. With ``strict=True``, or when a
    single backend is named, nothing outside the list is tried and "none available" raises
    ``BackendUnavailableError`` listing every reason;
    otherwise ONNX Runtime on the CPU is the last resort. ``options`` go to the backend that
    opens: ``validate`` (all), ``device_id``, ``execute`` ("sync"|"async", acl), ``threads``,
    ``inter_op_threads``, ``optimization``, ``mem_pattern``, ``cpu_arena``, ``allow_cpu_nodes``,
    ``provider_options``, ``profile`` (a folder for ONNX Runtime's profiler; ONNX Runtime backends
    and ``sim``), ``soc`` (the soc to simulate, default
    Ascend310B4) and ``memory`` (the board's memory: bytes or "4GiB"; default the board's own)
    for ``sim``, which also takes ``threads``.
    """
    order = (backends,) if isinstance(backends, str) else tuple(backends)
    if not order:
        raise InputError("backends is empty", hint=f"name some of {', '.join(BACKENDS)}",
                         reference=Ref.UNKNOWN_BACKEND)
    _check_backend_names(order)
    _check_options(options)
    strict = strict or len(order) == 1
    if not strict and LAST_RESORT not in order:
        order = (*order, LAST_RESORT)
    source = resolve_source(model_or_build_dir)
    skipped: dict[str, str] = {}
    refused: list[str] = []  # backends present here that could not open this model
    for name in order:
        found = probe(name, source)
        if not found.ok:
            skipped[name] = found.reason
            continue
        try:
            session = _open(name, source, options)
        except BackendUnavailableError as exc:
            skipped[name] = exc.message
            refused.append(name)
            continue
        session.skipped = skipped
        if skipped:
            _warn_fallback(source.label, name, skipped, refused)
        return session
    raise BackendUnavailableError(
        f"no backend in ({', '.join(order)}) can run {source.label} here",
        context="\n".join(f"{name}: {reason}" for name, reason in skipped.items()),
        hint="`edgefuse doctor` shows what each backend needs",
    )


def _open(name: str, source: ModelSource, options: dict[str, Any]) -> Session:
    backend = BACKEND_TABLE[name]
    mine = {k: v for k, v in options.items() if k in backend.options | _COMMON_OPTIONS}
    return backend.open(source, mine)


def _check_backend_names(names: Iterable[str]) -> None:
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise InputError(
            f"unknown backend(s): {', '.join(map(repr, unknown))}",
            hint=f"known backends: {', '.join(BACKENDS)}",
            reference=Ref.UNKNOWN_BACKEND,
        )


def _check_options(options: Mapping[str, Any]) -> None:
    known = _COMMON_OPTIONS.union(*(b.options for b in BACKEND_TABLE.values()))
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(
            f"unknown session option(s): {', '.join(unknown)}",
            hint=f"known options: {', '.join(sorted(known))}",
            reference=Ref.UNKNOWN_SESSION_OPTION,
        )
    for name in ("threads", "inter_op_threads"):
        if options.get(name) is not None:
            integer_at_least(name, options[name], 1)
    if "device_id" in options:
        integer_at_least("device_id", options["device_id"], 0)
    for name in ("validate", "mem_pattern", "cpu_arena", "allow_cpu_nodes"):
        if name in options and not isinstance(options[name], bool):
            raise InputError(f"{name} must be True or False, got {options[name]!r}",
                             reference=Ref.BAD_ARGUMENT)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_fallback(label: str, name: str, skipped: dict[str, str], refused: list[str]) -> None:
    """One line for backends this host does not have (a laptop has no pyACL and no CUDA on
    every run: ``edgefuse doctor`` says what each needs, the reasons are logged at DEBUG); the
    reason in full for a backend that is here and refused this model."""
    absent = [b for b in skipped if b not in refused]
    parts = [f"{b}: {skipped[b]}" for b in refused]
    if absent:
        parts.append(f"{', '.join(absent)} not available here (`edgefuse doctor` says why)")
    _warn_once(f"{label}: running on '{name}'; " + "; ".join(parts))
    for backend, reason in skipped.items():
        log.debug("%s: skipped %s: %s", label, backend, reason)


def _warn_once(message: str) -> None:
    """Log a fallback once per process: an app that opens a session per frame must not spam."""
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    log.warning(message)
