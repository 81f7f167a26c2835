"""The host backends: ONNX Runtime on the CPU, on CUDA, or on TensorRT, one provider per session.

Why not just ``InferenceSession(providers=[...])``: ONNX Runtime falls back silently. When the
CUDA provider cannot be created (missing cuDNN, wrong driver) the session still opens, on the CPU
(microsoft/onnxruntime#23372); when a run fails on an EP it prints and retries on the CPU
(``enable_fallback``); and nodes the GPU EP does not take are placed on the CPU EP without a
word. Here:
- ``enable_fallback=0`` turns off the retry-on-CPU in construction and in ``run``;
- the session is checked to really run on the requested provider, else the backend is reported
  unavailable (``open_session`` then records why and moves on, visibly);
- for GPU providers, ``session.disable_cpu_ep_fallback=1`` makes ONNX Runtime refuse a graph
  that would put nodes on the CPU; ``allow_cpu_nodes=True`` accepts that knowingly.

GPU sessions use I/O binding: inputs are copied to the device once per run and outputs are
allocated on the device by ONNX Runtime, then copied back once. On the CPU, ``input_buffers``
hands out numpy arrays each wrapped once in an ``OrtValue`` (``OrtValue.ortvalue_from_numpy``
on the CPU keeps the array's memory: its ``data_ptr()`` is the array's), and ``run`` on them goes
through ``run_with_ort_values``: what the preprocessing wrote is what the kernels read.

Custom ``edgefuse`` ops travel in the model as model-local functions (their decompositions) and
are inlined before ONNX Runtime sees the model, so the artifact that carries them for the board
also runs here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner

from edgefuse._deps import require
from edgefuse._graph_walk import all_nodes
from edgefuse._ort import ort_errors
from edgefuse.acl.ops.host import host_runnable_model, refuse_board_ops
from edgefuse.acl.ops.spec import DOMAIN as CUSTOM_DOMAIN
from edgefuse.errors import (
    BackendUnavailableError,
    InputError,
    MissingDependencyError,
    ModelLoadError,
    Ref,
)
from edgefuse.session import Availability, InputBuffers, Session, TensorSpec

PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
# The graph ONNX Runtime runs (after its own fusions), saved next to a profile: its node names
# are the ones the profiler's events carry.
PROFILED_GRAPH = "onnxruntime_graph.onnx"

_ORT_TYPES: dict[str, np.dtype] = {
    f"tensor({name})": np.dtype(dtype)
    for name, dtype in (
        ("float", np.float32), ("float16", np.float16), ("double", np.float64),
        ("int8", np.int8), ("int16", np.int16), ("int32", np.int32), ("int64", np.int64),
        ("uint8", np.uint8), ("uint16", np.uint16), ("uint32", np.uint32),
        ("uint64", np.uint64), ("bool", np.bool_),
    )
}


def _ort() -> Any:
    return require("onnxruntime", extra="gpu", purpose="Running models on the host")


def probe_provider(backend: str) -> Availability:
    """Whether this onnxruntime build has the provider behind ``backend``."""
    try:
        ort = _ort()
    except (ImportError, MissingDependencyError) as exc:
        return Availability(False, f"onnxruntime cannot be imported: {exc}")
    provider = PROVIDERS[backend]
    available = ort.get_available_providers()
    if provider in available:
        return Availability(True, f"onnxruntime {ort.__version__} with {provider}")
    package = "onnxruntime-gpu" if backend in ("cuda", "tensorrt") else "onnxruntime"
    return Availability(
        False,
        f"onnxruntime {ort.__version__} has no {provider} (it has {', '.join(available)}); "
        f"install {package}" + (" with TensorRT" if backend == "tensorrt" else ""),
    )


def session_options(
    provider: str,
    *,
    threads: int | None = None,
    inter_op_threads: int | None = None,
    optimization: str = "all",
    mem_pattern: bool = True,
    cpu_arena: bool = True,
    allow_cpu_nodes: bool = False,
    profile: str | os.PathLike[str] | None = None,
) -> Any:
    """The ``SessionOptions`` an OrtSession uses; ``None`` thread counts keep ONNX Runtime's.

    With ``profile`` (a folder), ONNX Runtime's own profiler records every run there and the
    graph it runs after its own fusions is saved as ``PROFILED_GRAPH`` in the same folder.
    """
    ort = _ort()
    if optimization not in OPTIMIZATION_LEVELS:
        raise InputError(f"optimization must be one of {OPTIMIZATION_LEVELS}, got "
                         f"{optimization!r}", reference=Ref.BAD_SESSION_OPTION)
    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_mem_pattern = mem_pattern
    options.enable_cpu_mem_arena = cpu_arena
    if threads is not None:
        options.intra_op_num_threads = threads
    if inter_op_threads is not None:
        options.inter_op_num_threads = inter_op_threads
    if provider != "cpu" and not allow_cpu_nodes:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(profile) / "onnxruntime_profile")
        options.optimized_model_filepath = str(Path(profile) / PROFILED_GRAPH)
        # ONNX Runtime warns that a saved NCHWc graph only suits this machine: it is read here,
        # on this machine, to name the kernels; the warning would only alarm the user.
        options.log_severity_level = 3
    return options


class OrtSession(Session):
    """A model on one ONNX Runtime execution provider, with no silent CPU fallback."""

    def __init__(
        self,
        model: str | os.PathLike[str] | onnx.ModelProto,
        provider: str = "cpu",
        *,
        device_id: int = 0,
        threads: int | None = None,
        inter_op_threads: int | None = None,
        optimization: str = "all",
        mem_pattern: bool = True,
        cpu_arena: bool = True,
        allow_cpu_nodes: bool = False,
        provider_options: Mapping[str, Any] | None = None,
        profile: str | os.PathLike[str] | None = None,
        validate: bool = True,
    ) -> None:
        if provider not in PROVIDERS:
            raise InputError(f"unknown provider {provider!r}",
                             hint=f"one of {', '.join(PROVIDERS)}", reference=Ref.UNKNOWN_BACKEND)
        ort = _ort()
        self.backend = provider
        options = session_options(
            provider, threads=threads, inter_op_threads=inter_op_threads,
            optimization=optimization, mem_pattern=mem_pattern, cpu_arena=cpu_arena,
            allow_cpu_nodes=allow_cpu_nodes, profile=profile,
        )
        self._profiling = profile is not None
        providers = self._providers(provider, device_id, dict(provider_options or {}))
        loadable = _model_for_ort(model)  # raises edgefuse's own errors: not wrapped below
        try:
            self._session = ort.InferenceSession(
                loadable, options, providers=providers, enable_fallback=0
            )
        except ort_errors() as exc:
            raise self._creation_error(provider, exc) from exc
        actual = self._session.get_providers()
        if not actual or actual[0] != PROVIDERS[provider]:
            raise BackendUnavailableError(
                f"onnxruntime did not create {PROVIDERS[provider]} (it runs on "
                f"{', '.join(actual)})",
                hint="the provider's libraries (CUDA, cuDNN, TensorRT) are missing or do not "
                "match this onnxruntime build; `edgefuse doctor` shows what is installed",
            )
        self.providers: tuple[str, ...] = tuple(actual)
        self.device_id = device_id
        self._output_names = [o.name for o in self._session.get_outputs()]
        self._input_names = [i.name for i in self._session.get_inputs()]
        self._bound = provider != "cpu"
        super().__init__(
            [_spec(arg) for arg in self._session.get_inputs()],
            [_spec(arg) for arg in self._session.get_outputs()],
            validate=validate,
        )

    @property
    def ort_session(self) -> Any:
        """The underlying ``onnxruntime.InferenceSession`` (for comparisons and benchmarks)."""
        return self._session

    def end_profiling(self) -> Path:
        """Stop ONNX Runtime's profiler; the JSON trace file it wrote (``profile=`` was given)."""
        if not self._profiling:
            return super().end_profiling()
        return Path(self._session.end_profiling())

    def _input_buffers(self, shapes: dict[str, tuple[int, ...]]) -> InputBuffers:
        buffers = super()._input_buffers(shapes)
        if self._bound:  # a GPU: ONNX Runtime copies host arrays to the device once per run
            return buffers
        ort = _ort()
        values = {name: ort.OrtValue.ortvalue_from_numpy(buffers[name]) for name in buffers}
        return InputBuffers(self, buffers, handle=values)

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._bound:
            return self._run_bound(feeds)
        if isinstance(feeds, InputBuffers) and feeds.owned_by(self) and feeds.handle is not None:
            results = self._session.run_with_ort_values(self._output_names, feeds.handle)
            return dict(zip(self._output_names, (value.numpy() for value in results),
                            strict=True))
        return dict(zip(self._output_names, self._session.run(self._output_names, feeds),
                        strict=True))

    def _run_bound(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # A binding per call keeps concurrent runs independent; ONNX Runtime allocates the
        # device outputs from its arena, so this costs no cudaMalloc after the first runs.
        binding = self._session.io_binding()
        for name in self._input_names:
            binding.bind_cpu_input(name, np.ascontiguousarray(feeds[name]))
        for name in self._output_names:
            binding.bind_output(name, "cuda", self.device_id)
        self._session.run_with_iobinding(binding)
        return dict(zip(self._output_names, binding.copy_outputs_to_cpu(), strict=True))

    def _close(self) -> None:
        del self._session

    @staticmethod
    def _providers(provider: str, device_id: int, extra: dict[str, Any]) -> list[Any]:
        if provider == "cpu":
            return [(PROVIDERS["cpu"], extra)] if extra else [PROVIDERS["cpu"]]
        if provider == "cuda":
            return [(PROVIDERS["cuda"], {"device_id": device_id, **extra})]
        # TensorRT takes the subgraphs it supports; the CUDA EP, its documented companion, takes
        # the rest. The CPU EP still takes nothing (disable_cpu_ep_fallback).
        return [(PROVIDERS["tensorrt"], {"device_id": device_id, **extra}),
                (PROVIDERS["cuda"], {"device_id": device_id})]

    @staticmethod
    def _creation_error(provider: str, exc: Exception) -> Exception:
        text = str(exc)
        if provider != "cpu" and "CPU EP" in text:
            # ONNX Runtime says only that nodes would land on the CPU EP: either the provider
            # could not be created at all, or some nodes have no kernel on it.
            return BackendUnavailableError(
                f"onnxruntime would run nodes on the CPU instead of {PROVIDERS[provider]}: the "
                "provider could not be created here, or some nodes have no kernel on it",
                context=text.strip().splitlines()[-1] if text.strip() else None,
                hint="`edgefuse doctor` checks the CUDA/cuDNN/TensorRT install; if the provider "
                "works and only some ops lack kernels, pass allow_cpu_nodes=True",
            )
        if provider != "cpu" and isinstance(exc, RuntimeError) and "Provider" in text:
            return BackendUnavailableError(
                f"{PROVIDERS[provider]} could not be created: {text.strip()}",
                hint="check the CUDA/cuDNN/TensorRT install against this onnxruntime-gpu build",
            )
        return ModelLoadError(
            f"onnxruntime could not load the model: {text.strip()}",
            hint="check the model with `edgefuse verify` or onnx.checker",
        )


def _model_for_ort(model: str | os.PathLike[str] | onnx.ModelProto) -> str | bytes:
    """A path when ONNX Runtime can read the file as it is, else bytes of the inlined model."""
    if isinstance(model, onnx.ModelProto):
        return host_runnable_model(model).SerializeToString()
    path = Path(model)
    if not path.is_file():
        raise InputError(f"'{path}' does not exist", reference=Ref.MODEL_NOT_FOUND)
    try:
        header = onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise InputError(f"cannot read '{path}': {exc.strerror or exc}",
                         hint="check the file's permissions (ls -l)",
                         reference=Ref.CANNOT_READ) from exc
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and friends
        raise ModelLoadError(f"'{path}' is not an ONNX model: {exc}",
                             hint="give the .onnx file edgefuse convert or compile wrote",
                             reference=Ref.NOT_ONNX) from exc
    refuse_board_ops(header, f"'{path}'")
    if not header.functions and not any(n.domain == CUSTOM_DOMAIN for n in all_nodes(header.graph)):
        return str(path)
    onnx.load_external_data_for_model(header, str(path.parent))
    return host_runnable_model(header).SerializeToString()


def _spec(arg: Any) -> TensorSpec:
    dtype = _ORT_TYPES.get(arg.type)
    if dtype is None:
        raise ModelLoadError(
            f"'{arg.name}' has type {arg.type}, which edgefuse sessions do not support",
            hint="use tensor inputs and outputs of a numpy dtype (float32, float16, int*, uint8)",
            reference=Ref.UNSUPPORTED_IO_TYPE,
        )
    shape = tuple(d if isinstance(d, int) or d is None else str(d) for d in (arg.shape or ()))
    return TensorSpec(arg.name, shape, dtype)
