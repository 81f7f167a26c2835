"""verify: run a reference and a candidate model on the same inputs and gate on their agreement.

Why ONNX Runtime with graph optimizations disabled: verify judges the graphs as written. With
ORT's own fusions on, a broken rewrite could be masked (or an exact one blurred) by ORT rewriting
both graphs differently. A candidate holding FP16 tensors runs with FP16 storage emulated
(``edgefuse.reference.fp16``), because ORT's CPU provider computes most FP16 ops in FP32 and
skips the rounding between them, which makes host numbers look better than the board's.
Per-layer analysis lives in ``edgefuse.verify.layers``, task-level parity in
``edgefuse.verify.task``.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import onnx

from edgefuse._checks import integer_at_least, non_negative_number, number_in
from edgefuse._files import check_distinct_outputs, check_outputs_spare_inputs, write_text
from edgefuse.convert.onnx_load import load_model
from edgefuse.preprocess import Preprocess
from edgefuse.reference.compare import Gate, OutputAgreement, compare_outputs, degenerate_outputs
from edgefuse.reference.feeds import FeedSource, calibration_preprocess, feed_set, input_specs
from edgefuse.reference.fp16 import coerce_feeds, fp16_storage_model, has_fp16, tensor_types
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.verify.layers import DEFAULT_LAYER_ALARM, LayerReport, compare_layers
from edgefuse.verify.task import DEFAULT_GT_CONF, DEFAULT_MIN_SCORE, TaskParity, task_parity

DEFAULT_MIN_COSINE = 0.99999
# The default gate when the candidate runs with FP16 storage (an FP16 model, or --emulate-fp16).
DEFAULT_FP16_MIN_COSINE = 0.999
# The default gate when the candidate quantizes activations (QuantizeLinear: `quantize --int8
# --emulate`'s host emulation of the board's INT8): the build spec's `int8_min_cosine`. INT8
# rounds every activation to 256 levels, so the FP32/FP16 gates fail every sound INT8 model.
DEFAULT_INT8_MIN_COSINE = 0.99


@dataclasses.dataclass
class VerifyResult:
    outputs: list[OutputAgreement]
    min_cosine: float
    max_rel_l2: float | None
    seed: int | None
    samples: int = 1
    emulated_fp16: bool = False
    layers: LayerReport | None = None
    task: TaskParity | None = None
    # Outputs nearly constant on the inputs used (name -> why): left out of the gate.
    degenerate: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def gated(self) -> list[OutputAgreement]:
        """The outputs the gate judges: those that vary on the inputs."""
        return [o for o in self.outputs if o.name not in self.degenerate]

    @property
    def inconclusive(self) -> bool:
        """Every output was nearly constant: nothing was measured (neither pass nor fail)."""
        return bool(self.outputs) and not self.gated

    @property
    def passed(self) -> bool:
        return (not self.inconclusive and all(o.passed for o in self.gated)
                and (self.task is None or self.task.passed))

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "min_cosine": self.min_cosine,
            "max_rel_l2": self.max_rel_l2,
            "seed": self.seed,
            "samples": self.samples,
            "emulated_fp16": self.emulated_fp16,
            "outputs": [o.to_json() for o in self.outputs],
            "degenerate": self.degenerate,
            "inconclusive": self.inconclusive,
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
            verdict = "n/a" if o.name in self.degenerate else "ok" if o.passed else "FAIL"
            lines.append(
                f"{o.name:<{width}}  {o.cosine:>12.8f}  {o.max_abs_error:>12.4g}  "
                f"{o.rel_l2_error:>12.4g}  {verdict}"
            )
        source = "seeded random inputs" if self.seed is not None else "these inputs"
        lines += [f"note: output '{name}' is nearly constant on {source} ({why}): the gate "
                  "leaves it out" for name, why in self.degenerate.items()]
        lines += [f"note: output '{o.name}' holds NaN, or infinities where the other model does "
                  "not: no agreement can be measured" for o in self.outputs
                  if not np.isfinite(o.cosine)]
        if self.task is not None:
            lines.append(self.task.render())
        gate = f"cosine >= {self.min_cosine}"
        if self.max_rel_l2 is not None:
            gate += f" and rel L2 <= {self.max_rel_l2}"
        if self.samples > 1:
            gate += f", worst of {self.samples} samples"
        if self.emulated_fp16:
            gate += ", candidate with FP16 storage emulated"
        if self.inconclusive:
            lines.append(f"INCONCLUSIVE: every output is nearly constant on {source}, so the "
                         "gate measures rounding, not agreement; pass real data: --inputs with "
                         "a folder of images, a video or .npz files")
        else:
            lines.append(f"{'PASSED' if self.passed else 'FAILED'} ({gate})")
        return "\n".join(lines)


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
    preprocess: Preprocess | str | os.PathLike[str] | None = None,
) -> VerifyResult:
    """Compare every output of ``candidate`` with ``reference`` on identical inputs.

    Outputs are matched by name; the candidate must produce every output the reference has, with
    the same shape. ``passed`` is False when any output misses a gate (the CLI exits 1): cosine
    >= ``min_cosine`` (default 0.99999, 0.999 when the candidate runs with FP16 storage, 0.99
    when it quantizes activations to INT8: a QDQ emulation). With
    several samples (a folder of .npz or images, a video, or ``samples`` random draws) each output
    reports its worst sample. An output nearly constant on every sample (a detector's map on
    noise) is left out of the gate and noted; when every output is, the result is inconclusive.
    ``preprocess`` turns images into inputs (default: the model's own record, else a resize).

    ``emulate_fp16``: None runs a candidate that holds FP16 tensors with FP16 storage emulated
    (ONNX Runtime's CPU provider skips FP16 rounding between ops) and an FP32 candidate as
    written; True also emulates ATC's default force_fp16 on an FP32 candidate. ``per_layer`` adds
    the layer-by-layer comparison (first sample), ``plot_path`` its PNG; ``task`` adds top-k
    agreement, AP50/AP50:95 or mean IoU against the reference's decisions.
    """
    samples = integer_at_least("samples", samples, 1)
    seed = integer_at_least("seed", seed, 0)
    if min_cosine is not None:
        min_cosine = number_in("min_cosine", min_cosine, -1.0, 1.0)
    if max_rel_l2 is not None:
        max_rel_l2 = non_negative_number("max_rel_l2", max_rel_l2)
    if alarm_cosine is not None:
        alarm_cosine = number_in("layer_alarm", alarm_cosine, -1.0, 1.0)
    if min_task_score is not None:
        min_task_score = number_in("min_task_score", min_task_score, 0.0, 1.0)
    if gt_conf is not None:
        gt_conf = number_in("gt_conf", gt_conf, 0.0, 1.0)
    check_distinct_outputs(report=json_path, plot=plot_path)
    check_outputs_spare_inputs({"report": json_path, "plot": plot_path},
                               {"reference": reference, "candidate": candidate, "inputs": inputs})
    ref_model = load_model(reference, copy=False)
    cand_model = load_model(candidate, copy=False)
    feeds_list = feed_set(input_specs(ref_model), inputs, seed=seed, samples=samples,
                          preprocess=calibration_preprocess(ref_model, preprocess))
    used_seed = seed if inputs is None else None
    cand_types = tensor_types(cand_model)
    declared = has_fp16(cand_model, cand_types)
    emulate = declared if emulate_fp16 is None else emulate_fp16
    runnable = (fp16_storage_model(cand_model, force_fp16=not declared, types=cand_types)
                if emulate else cand_model)
    if min_cosine is None:
        min_cosine = (DEFAULT_INT8_MIN_COSINE if quantizes_activations(cand_model) else
                      DEFAULT_FP16_MIN_COSINE if emulate else DEFAULT_MIN_COSINE)
    ref_outs = [run_onnx(ref_model, feeds) for feeds in feeds_list]
    cand_outs = [run_onnx(runnable, coerce_feeds(runnable, feeds)) for feeds in feeds_list]
    outputs = compare_outputs(ref_outs, cand_outs, Gate(min_cosine, max_rel_l2))
    result = VerifyResult(outputs, min_cosine, max_rel_l2, used_seed,
                          samples=len(feeds_list), emulated_fp16=emulate,
                          degenerate=degenerate_outputs(ref_outs))
    if per_layer or plot_path is not None:
        result.layers = compare_layers(
            ref_model, cand_model, feeds_list[0], emulate_fp16=emulate,
            alarm_cosine=DEFAULT_LAYER_ALARM if alarm_cosine is None else alarm_cosine,
            candidate_types=cand_types,
        )
        if plot_path is not None:
            result.layers.plot(plot_path)
    if task is not None:
        result.task = task_parity(
            task, ref_outs, cand_outs,
            min_score=DEFAULT_MIN_SCORE if min_task_score is None else min_task_score,
            gt_conf=DEFAULT_GT_CONF if gt_conf is None else gt_conf,
        )
    if json_path is not None:
        write_text(json_path, json.dumps(result.to_json(), indent=2))
    return result


def quantizes_activations(model: onnx.ModelProto) -> bool:
    """Whether ``model`` rounds activations to integers (a QuantizeLinear in its graph), as the
    host emulation of an INT8 build does."""
    return any(node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear")
               for node in model.graph.node)
