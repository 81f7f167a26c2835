"""verify: run a reference and a candidate model on the same inputs and gate on their agreement.

Why ONNX Runtime with graph optimizations disabled: verify judges the graphs as written. With
ORT's own fusions on, a broken rewrite could be masked (or an exact one blurred) by ORT rewriting
both graphs differently. A candidate holding FP16 tensors runs with FP16 storage emulated
(``edgefuse.quantize.emulate``), because ORT's CPU provider computes most FP16 ops in FP32 and
skips the rounding between them, which makes host numbers look better than the board's.
Per-layer analysis lives in ``verify_layers``, task-level parity in ``verify_task``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx

from edgefuse._files import write_text
from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import InputError

if TYPE_CHECKING:
    from edgefuse.feeds import FeedSource
    from edgefuse.verify_layers import LayerReport
    from edgefuse.verify_task import TaskParity

DEFAULT_MIN_COSINE = 0.99999
# The default gate when the candidate runs with FP16 storage (an FP16 model, or --emulate-fp16).
DEFAULT_FP16_MIN_COSINE = 0.999


@dataclasses.dataclass
class OutputComparison:
    name: str
    shape: tuple[int, ...]
    cosine: float
    max_abs_error: float
    rel_l2_error: float
    passed: bool

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class VerifyResult:
    outputs: list[OutputComparison]
    min_cosine: float
    max_rel_l2: float | None
    seed: int | None
    samples: int = 1
    emulated_fp16: bool = False
    layers: LayerReport | None = None
    task: TaskParity | None = None

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and (self.task is None or self.task.passed)

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "min_cosine": self.min_cosine,
            "max_rel_l2": self.max_rel_l2,
            "seed": self.seed,
            "samples": self.samples,
            "emulated_fp16": self.emulated_fp16,
            "outputs": [o.to_json() for o in self.outputs],
            "task": self.task.to_json() if self.task is not None else None,
            "layers": self.layers.to_json() if self.layers is not None else None,
        }

    def render(self) -> str:
        width = max([len(o.name) for o in self.outputs] + [6])
        lines = [self.layers.render(), ""] if self.layers is not None else []
        lines += [
            f"{'output':<{width}}  {'cosine':>12}  {'max abs err':>12}  {'rel L2 err':>12}  gate"
        ]
        for o in self.outputs:
            lines.append(
                f"{o.name:<{width}}  {o.cosine:>12.8f}  {o.max_abs_error:>12.4g}  "
                f"{o.rel_l2_error:>12.4g}  {'ok' if o.passed else 'FAIL'}"
            )
        if self.task is not None:
            lines.append(self.task.render())
        gate = f"cosine >= {self.min_cosine}"
        if self.max_rel_l2 is not None:
            gate += f" and rel L2 <= {self.max_rel_l2}"
        if self.samples > 1:
            gate += f", worst of {self.samples} samples"
        if self.emulated_fp16:
            gate += ", candidate with FP16 storage emulated"
        lines.append(f"{'PASSED' if self.passed else 'FAILED'} ({gate})")
        return "\n".join(lines)


def compare_arrays(reference: np.ndarray, candidate: np.ndarray) -> tuple[float, float, float]:
    """(cosine similarity, max absolute error, relative L2 error) computed in float64.

    Two all-zero tensors agree perfectly (cosine 1); one all-zero against a non-zero one does
    not (cosine 0), rather than a division by zero.
    """
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    cand = np.asarray(candidate, dtype=np.float64).reshape(-1)
    if ref.shape != cand.shape:
        raise ValueError(f"shape mismatch: {reference.shape} vs {candidate.shape}")
    if ref.size == 0:
        return 1.0, 0.0, 0.0
    if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(cand))):
        same = np.array_equal(ref, cand, equal_nan=True)
        return (1.0, 0.0, 0.0) if same else (float("nan"), float("inf"), float("inf"))
    diff = cand - ref
    ref_norm, cand_norm = np.linalg.norm(ref), np.linalg.norm(cand)
    if ref_norm == 0 and cand_norm == 0:
        cosine = 1.0
    elif ref_norm == 0 or cand_norm == 0:
        cosine = 0.0
    else:
        cosine = float(np.dot(ref, cand) / (ref_norm * cand_norm))
    rel_l2 = float(np.linalg.norm(diff) / ref_norm) if ref_norm else float(np.linalg.norm(diff))
    return cosine, float(np.max(np.abs(diff))), rel_l2


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs that fit the model's input spec (float: N(0,1); uint8: 0..255; ints: 0..9)."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = []
        for index, dim in enumerate(tensor_type.shape.dim):
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                raise InputError(
                    f"input '{value.name}' has a dynamic dimension {index} "
                    f"('{dim.dim_param or '?'}'), so random inputs cannot be made",
                    hint="fix the shape with `edgefuse convert --input NAME:d0,d1,...` "
                    "or pass real inputs with --inputs FILE.npz",
                    reference="dynamic-input-shape",
                )
            shape.append(dim.dim_value)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.uint8:
            feeds[value.name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 10, shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            raise InputError(
                f"input '{value.name}' has dtype {dtype}, for which no random input is defined",
                hint="pass real inputs with --inputs FILE.npz",
                reference="unsupported-input-dtype",
            )
    return feeds


def load_feeds(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Inputs from an .npz file (one array per input name)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read inputs from '{path}': {exc}",
            hint="save inputs with numpy.savez(path, **{input_name: array})",
            reference="bad-inputs-file",
        ) from exc


def run_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run on ONNX Runtime CPU with graph optimizations off; outputs by name."""
    import onnxruntime as ort  # noqa: PLC0415 - keep `import edgefuse` light

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    expected = {i.name for i in session.get_inputs()}
    missing, unknown = expected - set(feeds), set(feeds) - expected
    if missing or unknown:
        raise InputError(
            f"inputs do not match the model: missing {sorted(missing)}, unknown {sorted(unknown)}",
            hint=f"the model's inputs are {sorted(expected)}",
            reference="inputs-mismatch",
        )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def verify(
    reference: str | os.PathLike[str] | onnx.ModelProto,
    candidate: str | os.PathLike[str] | onnx.ModelProto,
    *,
    inputs: FeedSource | None = None,
    seed: int = 0,
    samples: int = 1,
    min_cosine: float | None = None,
    max_rel_l2: float | None = None,
    json_path: str | os.PathLike[str] | None = None,
    emulate_fp16: bool | None = None,
    per_layer: bool = False,
    alarm_cosine: float | None = None,
    plot_path: str | os.PathLike[str] | None = None,
    task: str | None = None,
    min_task_score: float | None = None,
    gt_conf: float | None = None,
) -> VerifyResult:
    """Compare every output of ``candidate`` with ``reference`` on identical inputs.

    Outputs are matched by name; the candidate must produce every output the reference has, with
    the same shape. ``passed`` is False when any output misses a gate (the CLI exits 1): cosine
    >= ``min_cosine`` (default 0.99999, or 0.999 when the candidate runs with FP16 storage). With
    several samples (a folder of .npz, or ``samples`` random draws) each output reports its worst
    sample.

    ``emulate_fp16``: None runs a candidate that holds FP16 tensors with FP16 storage emulated
    (ONNX Runtime's CPU provider skips FP16 rounding between ops) and an FP32 candidate as
    written; True also emulates ATC's default force_fp16 on an FP32 candidate. ``per_layer`` adds
    the layer-by-layer comparison (first sample), ``plot_path`` its PNG; ``task`` adds top-k
    agreement, AP50/AP50:95 or mean IoU against the reference's decisions.
    """
    from edgefuse.feeds import feed_set  # noqa: PLC0415 - these import verify
    from edgefuse.quantize.emulate import coerce_feeds, fp16_storage_model, has_fp16

    ref_model = load_model(reference, copy=False)
    cand_model = load_model(candidate, copy=False)
    feeds_list = feed_set(ref_model, inputs, seed=seed, samples=samples)
    used_seed = seed if inputs is None else None
    declared = has_fp16(cand_model)
    emulate = declared if emulate_fp16 is None else emulate_fp16
    runnable = fp16_storage_model(cand_model, force_fp16=not declared) if emulate else cand_model
    if min_cosine is None:
        min_cosine = DEFAULT_FP16_MIN_COSINE if emulate else DEFAULT_MIN_COSINE
    ref_outs = [run_onnx(ref_model, feeds) for feeds in feeds_list]
    cand_outs = [run_onnx(runnable, coerce_feeds(runnable, feeds)) for feeds in feeds_list]
    comparisons: dict[str, OutputComparison] = {}
    for ref_out, cand_out in zip(ref_outs, cand_outs, strict=True):
        for comparison in _compare_outputs(ref_out, cand_out, min_cosine, max_rel_l2):
            previous = comparisons.get(comparison.name)
            if previous is None or not comparison.cosine >= previous.cosine:
                comparisons[comparison.name] = comparison
    result = VerifyResult(list(comparisons.values()), min_cosine, max_rel_l2, used_seed,
                          samples=len(feeds_list), emulated_fp16=emulate)
    if per_layer or plot_path is not None:
        from edgefuse.verify_layers import DEFAULT_LAYER_ALARM, compare_layers  # noqa: PLC0415

        result.layers = compare_layers(
            ref_model, cand_model, feeds_list[0], emulate_fp16=emulate,
            alarm_cosine=DEFAULT_LAYER_ALARM if alarm_cosine is None else alarm_cosine,
        )
        if plot_path is not None:
            result.layers.plot(plot_path)
    if task is not None:
        from edgefuse.verify_task import (  # noqa: PLC0415
            DEFAULT_GT_CONF,
            DEFAULT_MIN_SCORE,
            task_parity,
        )

        result.task = task_parity(
            task, ref_outs, cand_outs,
            min_score=DEFAULT_MIN_SCORE if min_task_score is None else min_task_score,
            gt_conf=DEFAULT_GT_CONF if gt_conf is None else gt_conf,
        )
    if json_path is not None:
        write_text(json_path, json.dumps(result.to_json(), indent=2))
    return result


def _compare_outputs(
    ref_out: Mapping[str, np.ndarray],
    cand_out: Mapping[str, np.ndarray],
    min_cosine: float,
    max_rel_l2: float | None,
) -> list[OutputComparison]:
    missing = [name for name in ref_out if name not in cand_out]
    if missing:
        raise InputError(
            f"the candidate lacks the reference outputs {missing}",
            hint=f"the candidate's outputs are {sorted(cand_out)}",
            reference="outputs-mismatch",
        )
    comparisons = []
    for name, ref in ref_out.items():
        cand = cand_out[name]
        if ref.shape != cand.shape:
            raise InputError(
                f"output '{name}' has shape {cand.shape} in the candidate, {ref.shape} in the "
                "reference",
                reference="outputs-mismatch",
            )
        cosine, max_abs, rel_l2 = compare_arrays(ref, cand)
        passed = cosine >= min_cosine and (max_rel_l2 is None or rel_l2 <= max_rel_l2)
        comparisons.append(OutputComparison(name, ref.shape, cosine, max_abs, rel_l2, passed))
    return comparisons
