"""The Session every backend implements, the tensor specs it exposes, and the one feed checker.

Why a module of its own: the backends (pyACL on the board, ONNX Runtime on the host) subclass
``Session``, and ``open_session`` in ``edgefuse.runtime`` imports the backends. With the base
class in the dispatcher, each backend imported the module that imports it. Here nothing imports a
backend, so every layer above can depend on it (Polygraphy keeps its runner base the same way).

``Session`` is a template method (Polygraphy's runners): the public ``run`` validates the feeds'
names, dtypes and shapes against ``inputs`` and then calls the backend's ``_run``. Benchmarks open
sessions with ``validate=False`` to take the check out of the hot path. ``FeedChecker`` is the
check itself; the input loaders of ``edgefuse.reference.feeds`` use it too, so a file of inputs
and a live feed dict are refused with the same words.

``Session.input_buffers`` hands out a set of the session's own input buffers as writable arrays
(``InputBuffers``), so that a frame is written once, by the preprocessing or by the board's DVPP,
straight into the memory the model reads: ``run(buffers)`` then copies nothing. Where the backend
has such memory (the acl backend on a SoC whose host and device share memory, ONNX Runtime's
OrtValues over numpy) the arrays are it; elsewhere they are plain arrays and ``run`` makes the
copies it must (a PCIe card's HOST_TO_DEVICE), no more than a plain feed dict costs. Each call
allocates a new set, freed when the session closes: a pipeline keeps one set per frame in flight
(``edgefuse.vision.model.feed_pool``), so frame N+1 is written while frame N runs.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse.errors import EdgefuseError, InputError, Ref


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


class FeedChecker:
    """Checks feed dicts (input name -> array) against a model's input specs.

    ``check`` is strict (the exact dtype), for a session about to run; ``conform`` first casts a
    float array to the input's float dtype and adds a missing batch dimension of one, for arrays
    read from files. The per-input checks are precomputed so that ``check`` costs microseconds.
    """

    def __init__(self, specs: Iterable[TensorSpec]) -> None:
        self.specs: tuple[TensorSpec, ...] = tuple(specs)
        self._checks = tuple(
            (spec.name, len(spec.shape), spec.fixed_dims(), spec.dtype, spec)
            for spec in self.specs
        )
        self._names = frozenset(spec.name for spec in self.specs)

    def check(self, feeds: Mapping[str, Any], *, label: str | None = None,
              reference: Ref = Ref.BAD_FEEDS) -> None:
        """Raise an InputError naming the input, the expected and the given array on a mismatch."""
        if not isinstance(feeds, Mapping):
            raise InputError(
                f"{_prefix(label)}feeds must be a dict of input name -> numpy array, got "
                f"{type(feeds).__name__}",
                context=self.expected(), reference=reference,
            )
        if feeds.keys() != self._names:
            self._raise_names(feeds, label, reference)
        for name, ndim, fixed, dtype, spec in self._checks:
            value = feeds[name]
            if not isinstance(value, np.ndarray):
                raise InputError(
                    f"{_prefix(label)}input '{name}' must be a numpy array, got "
                    f"{type(value).__name__}",
                    context=f"expected {spec.describe()}",
                    hint="wrap it with numpy.asarray(value, dtype=...)",
                    reference=reference,
                )
            shape = value.shape
            if value.dtype != dtype or len(shape) != ndim or any(
                shape[axis] != size for axis, size in fixed
            ):
                raise self._mismatch(spec, value, label, reference)

    def conform(self, feeds: Mapping[str, Any], *, label: str | None = None,
                reference: Ref = Ref.BAD_FEEDS) -> dict[str, np.ndarray]:
        """``feeds`` with float arrays cast to the inputs' float dtypes and a batch of one added
        where a sample was saved without it; then checked strictly."""
        if not isinstance(feeds, Mapping):
            self.check(feeds, label=label, reference=reference)
        conformed = dict(feeds)
        for spec in self.specs:
            value = conformed.get(spec.name)
            if value is None:
                continue
            array = np.asarray(value)
            if array.dtype != spec.dtype and _both_float(array.dtype, spec.dtype):
                array = array.astype(spec.dtype)
            if array.ndim == len(spec.shape) - 1 and _batch_of_one(spec):
                array = array[np.newaxis]
            conformed[spec.name] = array
        self.check(conformed, label=label, reference=reference)
        return conformed

    def expected(self) -> str:
        return "the model takes: " + "; ".join(spec.describe() for spec in self.specs)

    def _raise_names(self, feeds: Mapping[str, Any], label: str | None, reference: Ref) -> None:
        missing = sorted(self._names - feeds.keys())
        unknown = sorted(str(k) for k in feeds.keys() - self._names)
        problems = []
        if missing:
            problems.append("missing input(s) " + ", ".join(f"'{n}'" for n in missing))
        if unknown:
            problems.append("unknown input(s) " + ", ".join(f"'{n}'" for n in unknown))
        raise InputError(
            _prefix(label) + "; ".join(problems),
            context=self.expected(),
            hint="feed exactly the inputs listed above, by name",
            reference=reference,
        )

    def _mismatch(self, spec: TensorSpec, value: np.ndarray, label: str | None,
                  reference: Ref) -> InputError:
        hint = None
        if value.dtype != spec.dtype:
            hint = f"convert it with array.astype(numpy.{spec.dtype.name})"
        elif len(value.shape) != len(spec.shape):
            hint = f"the model takes a {len(spec.shape)}-d array (batch dimension included?)"
        return InputError(
            f"{_prefix(label)}input '{spec.name}' expects {spec.signature()}, got "
            f"{describe_array(value)}",
            context=self.expected(),
            hint=hint,
            reference=reference,
        )


def describe_array(value: np.ndarray) -> str:
    """``float32[1,3,224,224]``; a string array is named for what it holds, not "object"."""
    kind = "string" if value.dtype.kind in "OUS" else value.dtype.name
    return f"{kind}[{','.join(str(d) for d in value.shape)}]"


def _prefix(label: str | None) -> str:
    return f"{label}: " if label else ""


def _both_float(a: np.dtype, b: np.dtype) -> bool:
    return np.issubdtype(a, np.floating) and np.issubdtype(b, np.floating)


def _batch_of_one(spec: TensorSpec) -> bool:
    return bool(spec.shape) and (spec.shape[0] == 1 or not isinstance(spec.shape[0], int))


class InputBuffers(Mapping[str, np.ndarray]):
    """A session's own input buffers as writable arrays, one per input, by name.

    Write the inputs into the arrays (``np.copyto``, ``cv2.resize(..., dst=)``, an ``out=``), then
    ``session.run(buffers)``: the session that made them reads them where they are. They are a
    feed dict like any other (a session that did not make them copies them). One set serves one
    frame at a time: write the next frame into another set while this one runs.

    ``device_addresses`` is the device address of each array where the memory is the device's
    (the acl backend on a shared-memory SoC): what DVPP's VPC may be given as its output picture
    (``acldvppSetPicDescData`` / ``hi_vpc_pic_info.picture_address``), so the decoded, resized frame
    is the model input without a CPU byte moved. ``None`` elsewhere.

    The arrays live as long as the session: ``close`` frees their memory, and an array read or
    written after that touches freed memory (on the board, device memory given back).
    """

    def __init__(self, owner: Session, arrays: Mapping[str, np.ndarray], *,
                 device_addresses: Mapping[str, int] | None = None, handle: Any = None) -> None:
        self.owner = owner
        self._arrays = dict(arrays)
        self.device_addresses: dict[str, int] | None = (
            dict(device_addresses) if device_addresses is not None else None)
        self.handle = handle  # the backend's own record of the set (acl: its dataset)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def owned_by(self, session: Session) -> bool:
        """Whether ``session`` made these buffers (and so runs them without a copy)."""
        return self.owner is session

    def __repr__(self) -> str:
        shared = "device-shared" if self.device_addresses is not None else "host"
        return (f"<InputBuffers {shared} of {self.owner.backend}: "
                f"{', '.join(f'{n}: {describe_array(a)}' for n, a in self._arrays.items())}>")


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
        self.feed_checker = FeedChecker(inputs)
        self.inputs: tuple[TensorSpec, ...] = self.feed_checker.specs
        self.outputs: tuple[TensorSpec, ...] = tuple(outputs)
        self.validate = validate
        self.skipped: dict[str, str] = {}
        self._closed = False
        self._close_lock = threading.Lock()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model on ``feeds`` (input name -> array); returns output name -> array."""
        self._check_open()
        if self.validate:
            self.feed_checker.check(feeds)
        return self._run(feeds)

    def input_buffers(self, shapes: Mapping[str, Iterable[int]] | None = None) -> InputBuffers:
        """A new set of this session's own input buffers, to write inputs into and run without a
        copy (``InputBuffers``); freed when the session closes.

        ``shapes`` (input name -> shape) is needed for inputs with dynamic dimensions (a gear
        model: the shape of the gear to run) and must keep the dimensions the model fixes.
        """
        self._check_open()
        return self._input_buffers(self._buffer_shapes(dict(shapes or {})))

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

    def end_profiling(self) -> Path:
        """Stop the backend's profiler and return the file it wrote; backends that profile
        (ONNX Runtime's, opened with ``profile=FOLDER``) override this."""
        raise EdgefuseError(
            f"this {self.backend} session is not profiling",
            hint="open it with open_session(..., profile=FOLDER) on an ONNX Runtime backend or "
                 "sim; `edgefuse profile` does this for you",
            reference=Ref.PROFILE_UNAVAILABLE,
        )

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

    def _check_open(self) -> None:
        if self._closed:
            raise EdgefuseError(
                f"this {self.backend} session is closed",
                hint="open a new session with edgefuse.open_session()",
                reference=Ref.SESSION_CLOSED,
            )

    def _input_buffers(self, shapes: dict[str, tuple[int, ...]]) -> InputBuffers:
        """Plain arrays: a backend with memory of its own that it can read in place overrides
        this."""
        return InputBuffers(self, {spec.name: np.zeros(shapes[spec.name], spec.dtype)
                                   for spec in self.inputs})

    def _buffer_shapes(self, shapes: dict[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
        unknown = sorted(set(shapes) - {spec.name for spec in self.inputs})
        if unknown:
            raise InputError(f"input_buffers: unknown input(s) {', '.join(unknown)}",
                             context=self.feed_checker.expected(), reference=Ref.BAD_FEEDS)
        resolved = {}
        for spec in self.inputs:
            given = shapes.get(spec.name)
            if given is None:
                if not all(isinstance(d, int) for d in spec.shape):
                    raise InputError(
                        f"input_buffers: input '{spec.name}' is {spec.signature()}, its size is "
                        "only known per run",
                        hint=f"give its shape: input_buffers(shapes={{'{spec.name}': (...)}}) "
                             "(for a gear model, the gear's)",
                        reference=Ref.BAD_FEEDS)
                resolved[spec.name] = tuple(int(d) for d in spec.shape)
                continue
            shape = tuple(int(d) for d in given)
            if len(shape) != len(spec.shape) or any(
                    shape[axis] != size for axis, size in spec.fixed_dims()) or min(
                    shape, default=1) < 1:
                raise InputError(
                    f"input_buffers: shape {list(shape)} does not fit input "
                    f"{spec.describe()}", reference=Ref.BAD_FEEDS)
            resolved[spec.name] = shape
        return resolved

    def _expected(self) -> str:
        return self.feed_checker.expected()
