"""Automatic mixed INT8/FP16: the few layers to leave FP16 (the simple config's ``skip_layers``) so
that the task metric under the host's INT8 emulation stays within a gate of FP16's.

Why the task metric and not a cosine: INT8 moves every output a little, and what matters is
whether a box falls below the confidence threshold or a pixel changes class. The metric is the
one ``verify --task`` scores (``edgefuse.verify.task``): top-1 agreement for classifiers, AP50 for
detectors, mean IoU for segmenters, each against the FP32 model's own decisions on the
calibration frames. The gate (``max_drop``, default 1 point) is measured from FP16's score on the
same frames (FP16 storage emulated, as the board's FP16 runs), since the layers left out of INT8
run FP16 on the board.

How (the FP16 gate's keep-FP32 search, ``edgefuse.quantize.mixed``, reused):
1. All layers INT8; if the metric is within the gate, nothing is kept.
2. Sensitivity: each layer quantized *alone* (every other layer float), its metric and the worst
   relative L2 error of the model's outputs. Layers are ranked by the metric they lose, then by
   output error (the metric often does not move for a single layer; the error still orders them).
   One evaluation per layer: the emulation is calibrated once (``Int8Emulation``) and each keep
   set is a rewiring of the same QDQ model, run by one ONNX Runtime session over the frames.
3. Gallop/bisect over the ranking for the shortest passing prefix, then prune kept layers that
   the gate does not need (``search_keep_set``), within ``max_evaluations`` and ``budget_s``.
4. For each kept layer, what it buys: the metric with the chosen set, and without that layer.
These are host predictions: the board's INT8 is ATC's, and only a board run (``run --record`` on
the board, ``verify --against``) confirms them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx

from edgefuse._deps import require
from edgefuse.acl.ops.host import host_runnable_model
from edgefuse.quantize.int8_emulate import Int8Emulation
from edgefuse.quantize.mixed import Candidate, search_keep_set
from edgefuse.reference.compare import compare_arrays
from edgefuse.reference.fp16 import run_fp16_storage
from edgefuse.verify.task import task_parity

DEFAULT_MAX_DROP = 1.0  # points (hundredths) of the task metric below FP16's
PREDICTION = ("host prediction (ONNX Runtime QDQ emulating CANN's IFMR/ARQ INT8) until a board "
              "confirms it: run --record on the board, then verify --against the recording")

Outputs = list[dict[str, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class LayerSensitivity:
    node: str
    op_type: str
    metric_alone: float  # the task metric with only this layer INT8
    output_error: float  # worst relative L2 error of the outputs with only this layer INT8

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class KeptLayer:
    node: str
    op_type: str
    reason: str  # "search" or "user"
    metric_with: float  # the chosen keep set
    metric_without: float  # the chosen keep set less this layer (this layer INT8)

    @property
    def buys(self) -> float:
        return self.metric_with - self.metric_without

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "buys_points": round(100 * self.buys, 3)}


@dataclasses.dataclass
class MixedInt8Result:
    task: str
    metric: str  # top1 / AP50 / mean_iou
    fp16: float
    all_int8: float
    mixed: float
    max_drop: float  # points
    passed: bool
    keep: tuple[str, ...]
    kept: list[KeptLayer]
    sensitivity: list[LayerSensitivity]
    evaluations: int
    seconds: float
    stopped_by: str | None
    steps: list[dict]
    samples: int

    @property
    def threshold(self) -> float:
        return self.fp16 - self.max_drop / 100

    def to_json(self) -> dict:
        return {
            "task": self.task, "metric": self.metric, "samples": self.samples,
            "reference": "the FP32 model's decisions on the calibration frames",
            "fp32": 1.0, "fp16": self.fp16, "int8_all_layers": self.all_int8,
            "int8_mixed": self.mixed, "max_drop_points": self.max_drop,
            "threshold": self.threshold, "passed": self.passed,
            "keep_fp16": list(self.keep), "kept": [k.to_json() for k in self.kept],
            "sensitivity": [s.to_json() for s in self.sensitivity],
            "evaluations": self.evaluations, "seconds": round(self.seconds, 2),
            "stopped_by": self.stopped_by, "steps": self.steps, "note": PREDICTION,
        }

    def render(self) -> str:
        lines = [
            f"INT8 ({self.task}, {self.metric} against FP32's decisions on {self.samples} "
            f"calibration frame(s)): FP16 {self.fp16:.4f}, all layers INT8 {self.all_int8:.4f}, "
            f"with {len(self.keep)} layer(s) kept FP16 {self.mixed:.4f} "
            f"[gate >= FP16 - {self.max_drop:g} point(s) = {self.threshold:.4f}: "
            f"{'ok' if self.passed else 'FAIL'}]"]
        for kept in self.kept:
            lines.append(f"  kept FP16 {kept.node} ({kept.op_type}, {kept.reason}): "
                         f"{self.metric} {kept.metric_with:.4f} with it, "
                         f"{kept.metric_without:.4f} if it were INT8 "
                         f"({100 * kept.buys:+.2f} points)")
        if self.stopped_by:
            lines.append(f"  search stopped by its {self.stopped_by} bound")
        lines.append(f"  ({PREDICTION})")
        return "\n".join(lines)


def choose_fp16_layers(
    emulation: Int8Emulation,
    samples: Sequence[Mapping[str, np.ndarray]],
    *,
    task: str,
    forced: Collection[str] = (),
    max_drop: float = DEFAULT_MAX_DROP,
    max_evaluations: int = 40,
    budget_s: float = 600.0,
) -> MixedInt8Result:
    """The layers of ``emulation`` to keep FP16 (``forced`` always among them) so that ``task``'s
    metric under INT8 is at least FP16's less ``max_drop`` points."""
    start = time.perf_counter()
    runs = _Runs(emulation, samples, task)
    fp16 = runs.score(runs.fp16_outputs())
    threshold = fp16 - max_drop / 100
    by_name = {node.name: node.op_type for node in emulation.fp32.graph.node}
    sensitivity: list[LayerSensitivity] = []

    unmeasured: list[str] = []

    def rank() -> list[Candidate]:
        """Layers by measured sensitivity; past ``budget_s`` the rest are not measured and
        follow in graph order (the search then stops at its own time check)."""
        everything = set(emulation.layers)
        for layer in emulation.layers:
            if layer in forced:
                continue
            if time.perf_counter() - start > budget_s:
                unmeasured.append(layer)
                continue
            keep = everything - {layer}
            sensitivity.append(LayerSensitivity(layer, by_name[layer], runs.metric(keep),
                                                runs.error(keep)))
        ordered = sorted(sensitivity, key=lambda s: (s.metric_alone, -s.output_error, s.node))
        return [Candidate(s.node, s.op_type, 1.0 - s.metric_alone,
                          f"alone INT8: {runs.metric_name} {s.metric_alone:.4f}, output "
                          f"relative L2 {s.output_error:.3g}") for s in ordered] + [
            Candidate(layer, by_name[layer], 0.0, "not measured (time budget)")
            for layer in unmeasured]

    search = search_keep_set(
        rank, set(forced), lambda keep: (runs.metric(keep), runs.metric(keep) >= threshold),
        max_evaluations=max_evaluations, budget_s=budget_s)
    keep = tuple(name for name in emulation.layers if name in set(forced) | set(search.kept))
    mixed = runs.metric(keep)
    kept = [KeptLayer(name, by_name[name], "user" if name in forced else "search", mixed,
                      runs.metric(set(keep) - {name})) for name in keep]
    return MixedInt8Result(
        task=task, metric=runs.metric_name, fp16=fp16, all_int8=runs.metric(()), mixed=mixed,
        max_drop=max_drop, passed=mixed >= threshold, keep=keep, kept=kept,
        sensitivity=sorted(sensitivity, key=lambda s: (s.metric_alone, -s.output_error)),
        evaluations=runs.evaluations, seconds=time.perf_counter() - start,
        stopped_by=search.stopped_by or ("time-budget" if unmeasured else None),
        steps=[{"kept": s.kept, "metric": s.min_cosine, "passed": s.passed, "action": s.action}
               for s in search.steps],
        samples=len(samples))


class _Runs:
    """The emulation's metric and output error per keep set, each computed once (one ORT session
    per model, every sample through it) against the FP32 references; outputs are not kept (a
    segmenter's logits over 16 frames weigh tens of MB per keep set)."""

    def __init__(self, emulation: Int8Emulation, samples: Sequence[Mapping[str, np.ndarray]],
                 task: str) -> None:
        self.emulation, self.samples, self.task = emulation, samples, task
        self.references = _run_all(emulation.fp32, samples)
        self.metric_name = str(task_parity(task, self.references, self.references)
                               .to_json()["gated_metric"])
        self._seen: dict[frozenset[str], tuple[float, float]] = {}

    @property
    def evaluations(self) -> int:
        return len(self._seen)

    def fp16_outputs(self) -> Outputs:
        return [run_fp16_storage(self.emulation.fp32, dict(s), force_fp16=True)
                for s in self.samples]

    def score(self, outputs: Outputs) -> float:
        value = task_parity(self.task, self.references, outputs).score
        return float("nan") if value is None else value

    def metric(self, keep: Collection[str]) -> float:
        return self._evaluate(keep)[0]

    def error(self, keep: Collection[str]) -> float:
        return self._evaluate(keep)[1]

    def _evaluate(self, keep: Collection[str]) -> tuple[float, float]:
        key = frozenset(keep)
        if key not in self._seen:
            outputs = _run_all(self.emulation.model_keeping(key), self.samples)
            error = max(compare_arrays(ref[name], out[name])[2]
                        for ref, out in zip(self.references, outputs, strict=True)
                        for name in ref)
            self._seen[key] = (self.score(outputs), error)
        return self._seen[key]


def _run_all(model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]]) -> Outputs:
    """Every sample through one ONNX Runtime session (optimizations off, as the reference runs:
    ORT's QDQ fusions would swap the emulated rounding for its own integer kernels)."""
    ort = require("onnxruntime", extra="gpu", purpose="Emulating INT8 on the host")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(host_runnable_model(model).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, dict(sample)), strict=True))
            for sample in samples]
