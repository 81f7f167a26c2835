"""Latency and throughput of a Session, side by side with raw ONNX Runtime and PyTorch eager.

Why side by side in one process, interleaved: on a small board or a shared laptop the machine's
speed drifts (thermal limits, other processes) by more than the differences being measured.
Every runner is warmed up, then the runners take turns in rounds, in alternating order, so drift
touches all of them alike. The Session is opened with ``validate=False`` so the numbers are the
backend's, and each runner gets identical inputs.

Latency is per call (p50/p90/p99, mean, min); throughput is samples per second at the given
batch, from the mean.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

import numpy as np
import onnx

from edgefuse._deps import require_torch
from edgefuse.convert.torch_export import load_torchscript
from edgefuse.errors import InputError, Ref
from edgefuse.fallback.ort_session import PROVIDERS
from edgefuse.model_source import resolve_source
from edgefuse.models import get_entry
from edgefuse.reference.feeds import FeedSource, feed_set
from edgefuse.runtime import DEFAULT_BACKENDS, open_session
from edgefuse.session import Session

DEFAULT_ITERATIONS = 100
DEFAULT_WARMUP = 10  # untimed runs per runner
DEFAULT_ROUNDS = 5


@dataclasses.dataclass(frozen=True)
class LatencyStats:
    runs: int
    batch: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float

    @property
    def throughput(self) -> float:
        """Samples per second."""
        return self.batch * 1000.0 / self.mean_ms if self.mean_ms else float("inf")

    def to_json(self) -> dict[str, float | int]:
        return {**dataclasses.asdict(self), "throughput_per_s": self.throughput}


def latency_stats(seconds: Iterable[float], batch: int = 1) -> LatencyStats:
    """Percentiles of per-call times given in seconds."""
    ms = np.asarray(list(seconds), dtype=np.float64) * 1e3
    if not ms.size:
        raise ValueError("no timings")
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return LatencyStats(int(ms.size), batch, float(p50), float(p90), float(p99),
                        float(ms.mean()), float(ms.min()))


class Progress:
    """A one-line progress bar on stderr, for runs long enough to wonder about."""

    def __init__(self, total: int, *, enabled: bool, stream: IO[str] | None = None,
                 width: int = 30) -> None:
        self.total, self.done, self.width = max(total, 1), 0, width
        self.enabled = enabled
        self.stream = stream or sys.stderr

    def advance(self, steps: int, label: str) -> None:
        self.done = min(self.total, self.done + steps)
        if self.enabled:
            filled = self.width * self.done // self.total
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] "
                              f"{100 * self.done // self.total:3d}% {label:<28.28}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


@dataclasses.dataclass
class BenchReport:
    model: str
    backend: str
    skipped: dict[str, str]
    batch: int
    inputs: dict[str, str]
    results: dict[str, LatencyStats]
    unavailable: dict[str, str]  # comparison runners that could not be set up, and why

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "backend": self.backend,
            "skipped": self.skipped,
            "batch": self.batch,
            "inputs": self.inputs,
            "results": {name: stats.to_json() for name, stats in self.results.items()},
            "unavailable": self.unavailable,
        }

    def render(self) -> str:
        lines = [f"{self.model}: backend {self.backend}, batch {self.batch}, inputs "
                 + ", ".join(f"{n}: {s}" for n, s in self.inputs.items())]
        lines += [f"  skipped {name}: {reason}" for name, reason in self.skipped.items()]
        header = f"{'runner':<26} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} {'mean ms':>9} " \
                 f"{'samples/s':>10} {'runs':>6}"
        lines += [header, "-" * len(header)]
        baseline = self.results.get(f"edgefuse/{self.backend}")
        for name, s in self.results.items():
            ratio = ""
            if baseline and name != f"edgefuse/{self.backend}":
                ratio = f"  ({s.p50_ms / baseline.p50_ms:.2f}x edgefuse's p50)"
            lines.append(f"{name:<26} {s.p50_ms:9.3f} {s.p90_ms:9.3f} {s.p99_ms:9.3f} "
                         f"{s.mean_ms:9.3f} {s.throughput:10.1f} {s.runs:6d}{ratio}")
        lines += [f"  {name}: not measured: {why}" for name, why in self.unavailable.items()]
        return "\n".join(lines)


def bench(
    model: str | os.PathLike[str] | onnx.ModelProto,
    backends: str | Iterable[str] = DEFAULT_BACKENDS,
    *,
    strict: bool = False,
    batch: int | None = None,
    warmup: int = DEFAULT_WARMUP,
    iterations: int | None = None,
    seconds: float | None = None,
    rounds: int = DEFAULT_ROUNDS,
    compare_onnxruntime: bool = True,
    torch_model: Any = None,
    seed: int = 0,
    inputs: FeedSource | None = None,
    progress: bool = False,
    **options: Any,
) -> BenchReport:
    """Time ``model`` on the backend ``open_session`` picks, next to raw ONNX Runtime and, given
    ``torch_model`` (an ``nn.Module``, a catalogue name, a TorchScript file or a torch.export
    ``.pt2`` file), PyTorch eager. ``inputs``: an .npz (or the first sample of a folder) to time
    on instead of seeded random feeds."""
    if iterations is not None and seconds is not None:
        raise InputError("give iterations or seconds, not both", reference=Ref.BAD_BENCH_OPTIONS)
    if (iterations is not None and iterations < 1) or (seconds is not None and seconds <= 0) \
            or warmup < 0 or rounds < 1:
        raise InputError("iterations, seconds and rounds must be positive, warmup >= 0",
                         reference=Ref.BAD_BENCH_OPTIONS)
    if iterations is None and seconds is None:
        iterations = DEFAULT_ITERATIONS
    source = resolve_source(model)
    session = open_session(source, backends, strict=strict, validate=False, **options)
    with session:
        feeds = feed_set(session.inputs, inputs, seed=seed, batch=batch)[0]
        effective_batch = next(iter(feeds.values())).shape[0] if feeds else 1
        runners: dict[str, Callable[[], Any]] = {
            f"edgefuse/{session.backend}": lambda: session.run(feeds)}
        unavailable: dict[str, str] = {}
        if compare_onnxruntime:
            _add(runners, unavailable, "onnxruntime", lambda: _raw_onnxruntime(source, session,
                                                                               feeds))
        if torch_model is not None:  # asked for by name: a bad source is the user's error
            name, runner = _torch_eager(torch_model, session, feeds)
            runners[name] = runner
        results = _measure(runners, warmup=warmup, iterations=iterations, seconds=seconds,
                           rounds=rounds, batch=effective_batch, progress=progress)
        return BenchReport(
            model=source.label, backend=session.backend, skipped=dict(session.skipped),
            batch=effective_batch,
            inputs={n: f"{a.dtype.name}[{','.join(map(str, a.shape))}]" for n, a in feeds.items()},
            results=results, unavailable=unavailable,
        )


def _add(runners: dict[str, Callable[[], Any]], unavailable: dict[str, str], kind: str,
         make: Callable[[], tuple[str, Callable[[], Any]]]) -> None:
    """Add a comparison nobody asked for by name; when it cannot be set up, say why instead."""
    try:
        name, runner = make()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        unavailable[kind] = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        return
    runners[name] = runner


def _raw_onnxruntime(source: Any, session: Session,
                     feeds: Mapping[str, np.ndarray]) -> tuple[str, Callable[[], Any]]:
    """ONNX Runtime as a user would call it: default options, the session's provider."""
    import onnxruntime as ort  # noqa: PLC0415 - onnxruntime-gpu may stand in for it

    if source.onnx is None:
        raise ValueError("the model is an OM only; there is no ONNX to compare with")
    backend = session.backend if session.backend in PROVIDERS else "cpu"
    model = source.onnx.SerializeToString() if isinstance(source.onnx, onnx.ModelProto) \
        else str(source.onnx)
    raw = ort.InferenceSession(model, providers=[PROVIDERS[backend]])
    fed = dict(feeds)
    return f"onnxruntime/{backend}", lambda: raw.run(None, fed)


def _torch_eager(torch_model: Any, session: Session,
                 feeds: Mapping[str, np.ndarray]) -> tuple[str, Callable[[], Any]]:
    torch = require_torch("Comparing with PyTorch eager")
    module = _torch_module(torch, torch_model)
    on_gpu = session.backend in ("cuda", "tensorrt") and torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    if on_gpu:
        module = module.to(device)
    tensors = [torch.from_numpy(np.ascontiguousarray(feeds[s.name])).to(device)
               for s in session.inputs]

    def run() -> None:
        with torch.inference_mode():
            module(*tensors)
        if on_gpu:
            torch.cuda.synchronize()

    return f"pytorch-eager/{device}", run


def _torch_module(torch: Any, torch_model: Any) -> Any:
    if isinstance(torch_model, torch.nn.Module):
        return torch_model
    text = os.fspath(torch_model)
    if os.path.isfile(text):
        if text.endswith(".pt2"):  # a torch.export program (already inference-only)
            return torch.export.load(text).module()
        module = load_torchscript(text)
        if module is None:
            raise InputError(
                f"'{text}' is not a TorchScript file (not even a zip archive)",
                hint="--torch takes a catalogue name, a torch.export .pt2 file or a TorchScript "
                "file saved with torch.jit.save",
                reference=Ref.NOT_TORCHSCRIPT,
            )
        return module.eval()
    return get_entry(text).build("full")


def _measure(runners: Mapping[str, Callable[[], Any]], *, warmup: int, iterations: int | None,
             seconds: float | None, rounds: int, batch: int,
             progress: bool) -> dict[str, LatencyStats]:
    names = list(runners)
    times: dict[str, list[float]] = {name: [] for name in names}
    per_chunk = max(1, (iterations or 0) // rounds)
    chunk_seconds = (seconds or 0.0) / rounds / len(names)
    bar = Progress(rounds * len(names), enabled=progress)
    try:
        for name in names:
            for _ in range(warmup):
                runners[name]()
        for round_index in range(rounds):
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                run, samples = runners[name], times[name]
                started = time.perf_counter()
                count = 0
                while (count < per_chunk) if seconds is None else (
                        time.perf_counter() - started < chunk_seconds or count == 0):
                    begin = time.perf_counter()
                    run()
                    samples.append(time.perf_counter() - begin)
                    count += 1
                bar.advance(1, name)
    finally:
        bar.close()
    return {name: latency_stats(times[name], batch) for name in names}
