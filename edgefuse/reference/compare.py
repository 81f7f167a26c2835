"""How close a candidate's arrays are to a reference's: one metrics record and one gate.

Why one record: verify's outputs, its per-layer rows, quantize's accuracy gate and compile's
parity check all ask the same question of two arrays; with a record and a worst-of-samples rule
each, they drifted (one counted a NaN cosine as -1, another as the worst). Here cosine, max
absolute and relative L2 error are computed once, in float64, and the worst sample of an output is
the one with the lowest cosine, a NaN (non-finite values that differ) counting as -1, the lowest
a cosine can be.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from edgefuse.errors import InputError, Ref


def compare_arrays(reference: np.ndarray, candidate: np.ndarray) -> tuple[float, float, float]:
    """(cosine similarity, max absolute error, relative L2 error) computed in float64.

    Two all-zero tensors agree perfectly (cosine 1); one all-zero against a non-zero one does
    not (cosine 0), rather than a division by zero. Infinities agree only where both arrays hold
    the same ones; a NaN never agrees with anything, itself included (a model that computes NaN
    has no parity to speak of). Where they do not agree, the cosine is NaN, the errors infinite.
    """
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    cand = np.asarray(candidate, dtype=np.float64).reshape(-1)
    if ref.shape != cand.shape:
        raise ValueError(f"shape mismatch: {reference.shape} vs {candidate.shape}")
    if ref.size == 0:
        return 1.0, 0.0, 0.0
    if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(cand))):
        same = np.array_equal(ref, cand)  # NaN != NaN
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


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Cosine, max absolute error and relative L2 error of a candidate against a reference."""

    cosine: float
    max_abs_error: float
    rel_l2_error: float

    @classmethod
    def between(cls, reference: np.ndarray, candidate: np.ndarray) -> Agreement:
        return cls(*compare_arrays(reference, candidate))

    @property
    def rank(self) -> float:
        """The cosine, a NaN counting as -1 (as low as a cosine goes): the key to the worst."""
        return self.cosine if not math.isnan(self.cosine) else -1.0

    def to_json(self) -> dict[str, float | None]:
        """The three figures; a non-finite one is null, so that the JSON stays standard."""
        return {key: value if math.isfinite(value) else None
                for key, value in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class Gate:
    """Pass when cosine >= ``min_cosine`` and, if given, relative L2 <= ``max_rel_l2``."""

    min_cosine: float
    max_rel_l2: float | None = None

    def admits(self, agreement: Agreement) -> bool:
        return agreement.cosine >= self.min_cosine and (
            self.max_rel_l2 is None or agreement.rel_l2_error <= self.max_rel_l2)

    def describe(self) -> str:
        text = f"cosine >= {self.min_cosine}"
        return text if self.max_rel_l2 is None else f"{text} and rel L2 <= {self.max_rel_l2}"


@dataclasses.dataclass(frozen=True)
class OutputAgreement:
    """One model output's worst agreement over the samples, and whether it passed the gate."""

    name: str
    shape: tuple[int, ...]
    agreement: Agreement
    passed: bool

    @property
    def cosine(self) -> float:
        return self.agreement.cosine

    @property
    def max_abs_error(self) -> float:
        return self.agreement.max_abs_error

    @property
    def rel_l2_error(self) -> float:
        return self.agreement.rel_l2_error

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), **self.agreement.to_json(),
                "passed": self.passed}


def compare_outputs(
    references: Sequence[Mapping[str, np.ndarray]],
    candidates: Sequence[Mapping[str, np.ndarray]],
    gate: Gate,
) -> list[OutputAgreement]:
    """Every reference output against the candidate's of the same name, sample by sample.

    Each output reports its worst sample (on a tie, the later one). The candidate must have every
    reference output, shaped alike.
    """
    worst: dict[str, OutputAgreement] = {}
    for reference, candidate in zip(references, candidates, strict=True):
        missing = [name for name in reference if name not in candidate]
        if missing:
            raise InputError(
                f"the candidate lacks the reference outputs {missing}",
                hint=f"the candidate's outputs are {sorted(candidate)}",
                reference=Ref.OUTPUTS_MISMATCH,
            )
        for name, ref in reference.items():
            cand = candidate[name]
            if ref.shape != cand.shape:
                raise InputError(
                    f"output '{name}' has shape {cand.shape} in the candidate, {ref.shape} in "
                    "the reference",
                    reference=Ref.OUTPUTS_MISMATCH,
                )
            agreement = Agreement.between(ref, cand)
            previous = worst.get(name)
            if previous is None or agreement.rank <= previous.agreement.rank:
                worst[name] = OutputAgreement(name, tuple(ref.shape), agreement,
                                              gate.admits(agreement))
    return list(worst.values())


# An output whose reference values stay within this fraction of their magnitude, or whose
# magnitude stays under NEAR_ZERO, carries no signal on these inputs: a text detector's
# probability map on noise is ~1e-5 everywhere, and FP16 rounding there decides the cosine.
NEAR_CONSTANT = 1e-3
NEAR_ZERO = 1e-3


def degenerate_outputs(references: Sequence[Mapping[str, np.ndarray]]) -> dict[str, str]:
    """Outputs that are (nearly) constant over every sample, with why; a gate on them measures
    rounding, not agreement."""
    found = {}
    for name in references[0] if references else ():
        values = [np.asarray(r[name], dtype=np.float64) for r in references]
        if values[0].dtype.kind != "f" or not all(v.size for v in values):
            continue
        if not all(np.all(np.isfinite(v)) for v in values):
            continue
        low, high = min(float(v.min()) for v in values), max(float(v.max()) for v in values)
        magnitude = max(abs(low), abs(high))
        if magnitude < NEAR_ZERO:
            found[name] = f"|x| <= {magnitude:.2g} everywhere"
        elif high - low <= NEAR_CONSTANT * magnitude:
            found[name] = f"it only spans {high - low:.2g} around {(high + low) / 2:.4g}"
    return found

