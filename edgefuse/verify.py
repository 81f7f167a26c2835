"""verify: run a reference and a candidate model on the same inputs and gate on their agreement.

Why ONNX Runtime with graph optimizations disabled: verify judges the graphs as written. With
ORT's own fusions on, a broken rewrite could be masked (or an exact one blurred) by ORT rewriting
both graphs differently.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

import numpy as np
import onnx

from edgefuse._files import write_text
from edgefuse.errors import InputError

DEFAULT_MIN_COSINE = 0.99999


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

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "min_cosine": self.min_cosine,
            "max_rel_l2": self.max_rel_l2,
            "seed": self.seed,
            "outputs": [o.to_json() for o in self.outputs],
        }

    def render(self) -> str:
        width = max([len(o.name) for o in self.outputs] + [6])
        lines = [
            f"{'output':<{width}}  {'cosine':>12}  {'max abs err':>12}  {'rel L2 err':>12}  gate"
        ]
        for o in self.outputs:
            lines.append(
                f"{o.name:<{width}}  {o.cosine:>12.8f}  {o.max_abs_error:>12.4g}  "
                f"{o.rel_l2_error:>12.4g}  {'ok' if o.passed else 'FAIL'}"
            )
        gate = f"cosine >= {self.min_cosine}"
        if self.max_rel_l2 is not None:
            gate += f" and rel L2 <= {self.max_rel_l2}"
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
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    min_cosine: float = DEFAULT_MIN_COSINE,
    max_rel_l2: float | None = None,
    json_path: str | os.PathLike[str] | None = None,
) -> VerifyResult:
    """Compare every output of ``candidate`` with ``reference`` on identical inputs.

    Outputs are matched by name; the candidate must produce every output the reference has, with
    the same shape. ``passed`` is False when any output misses a gate (the CLI exits 1).
    """
    ref_model, cand_model = _as_model(reference), _as_model(candidate)
    if inputs is None:
        feeds, used_seed = random_feeds(ref_model, seed), seed
    else:
        feeds, used_seed = (load_feeds(inputs) if not isinstance(inputs, Mapping) else inputs), None
    ref_out, cand_out = run_onnx(ref_model, feeds), run_onnx(cand_model, feeds)
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
    result = VerifyResult(comparisons, min_cosine, max_rel_l2, used_seed)
    if json_path is not None:
        write_text(json_path, json.dumps(result.to_json(), indent=2))
    return result


def _as_model(model: str | os.PathLike[str] | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    from edgefuse.convert.onnx_load import load_onnx  # noqa: PLC0415

    return load_onnx(model)
