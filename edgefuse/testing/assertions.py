"""Assertions for host-side tests of models and pipelines, whose failures say which output, where
and by how much.

Why not ``numpy.testing.assert_allclose``: an FP16 build is never element-wise close to its FP32
model with one tolerance (logits of 30 and of 0.01 round differently), and "Mismatched elements:
4012 / 21000" does not tell a developer whether the model broke or rounded. The gates here are
the ones edgefuse's own stages use (reference apps-and-pipelines.md §3.4): an output passes when
its cosine similarity to the reference is at least ``min_cosine`` and its largest absolute error
at most ``max_abs_error`` -- by default 1e-2 x max|reference| with FP16 numerics (a board, the
``sim`` backend, or FP16 arrays), 1e-4 x max|reference| otherwise; cosine 0.999 and 0.99999.
Integer outputs (class ids, counts) must be equal. A failure names the output and sample, the
worst element's index with both values, and the gate.

Detections match when every reference box has a box of the same class at IoU >= ``iou`` and no
box is left over (greedy by score, like COCO matching); masks when their mean IoU reaches
``min_mean_iou``. Their failures list the unmatched boxes (class, box, score, best overlap) and the
worst classes (IoU, pixels on each side), plus the first differing pixel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.goldens import replay_inputs
from edgefuse.metrics.detect import Detections, box_iou, match_detections
from edgefuse.metrics.segment import confusion, mean_iou
from edgefuse.reference.compare import compare_arrays
from edgefuse.reference.recording import Recording, board_numerics, load_recording
from edgefuse.session import Session
from edgefuse.vision.segment.decode import Segmentation

FP16_MIN_COSINE, FP32_MIN_COSINE = 0.999, 0.99999
FP16_MAX_ABS_FRACTION, FP32_MAX_ABS_FRACTION = 1e-2, 1e-4
_LISTED = 5  # unmatched boxes and classes shown in a message

Outputs = Mapping[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class OutputGate:
    """Cosine at least ``min_cosine``; max abs error at most ``max_abs_error`` (absolute) or, when
    that is None, ``max_abs_fraction`` of the reference's largest magnitude."""

    min_cosine: float
    max_abs_error: float | None = None
    max_abs_fraction: float | None = None

    @classmethod
    def default(cls, fp16: bool, min_cosine: float | None = None,
                max_abs_error: float | None = None) -> OutputGate:
        return cls(
            min_cosine if min_cosine is not None else
            (FP16_MIN_COSINE if fp16 else FP32_MIN_COSINE),
            max_abs_error,
            None if max_abs_error is not None else
            (FP16_MAX_ABS_FRACTION if fp16 else FP32_MAX_ABS_FRACTION),
        )

    def limit(self, expected: np.ndarray) -> float:
        """The max abs error allowed against ``expected``."""
        if self.max_abs_error is not None:
            return self.max_abs_error
        finite = np.abs(expected[np.isfinite(expected)]) if expected.size else np.zeros(0)
        return float(self.max_abs_fraction * (finite.max() if finite.size else 0.0))

    def describe(self) -> str:
        abs_part = (f"max abs error <= {self.max_abs_error:g}" if self.max_abs_error is not None
                    else f"max abs error <= {self.max_abs_fraction:g} x max|expected|")
        return f"cosine >= {self.min_cosine:g} and {abs_part}"


def assert_outputs_close(
    actual: Outputs | Sequence[Outputs],
    expected: Outputs | Sequence[Outputs],
    *,
    min_cosine: float | None = None,
    max_abs_error: float | None = None,
    fp16: bool | None = None,
    what: str = "outputs",
) -> None:
    """Every output of ``expected`` (one sample's dict, or a list of samples) is in ``actual``
    with the same shape and within the gate (see the module docstring).

    ``fp16``: take the FP16 gate; None decides from the arrays (any float16 one). ``what`` names
    the comparison in the message.
    """
    actual_samples, expected_samples = _samples(actual), _samples(expected)
    if len(actual_samples) != len(expected_samples):
        raise AssertionError(f"{what}: {len(actual_samples)} actual sample(s) against "
                             f"{len(expected_samples)} expected")
    if fp16 is None:
        fp16 = any(np.asarray(a).dtype == np.float16 for sample in
                   (*actual_samples, *expected_samples) for a in sample.values())
    gate = OutputGate.default(fp16, min_cosine, max_abs_error)
    problems = []
    for index, (got, want) in enumerate(zip(actual_samples, expected_samples, strict=True)):
        label = f"sample {index}: " if len(expected_samples) > 1 else ""
        missing = [name for name in want if name not in got]
        if missing:
            problems.append(f"{label}output(s) {', '.join(map(repr, missing))} missing; "
                            f"actual has {sorted(got)}")
        for name in (n for n in want if n in got):
            problem = _output_problem(np.asarray(got[name]), np.asarray(want[name]), gate)
            if problem:
                problems.append(f"{label}output '{name}': {problem}")
    if problems:
        raise AssertionError(f"{what} differ ({gate.describe()}):\n  " + "\n  ".join(problems))


def _output_problem(got: np.ndarray, want: np.ndarray, gate: OutputGate) -> str | None:
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if not (np.issubdtype(want.dtype, np.floating) and np.issubdtype(got.dtype, np.floating)):
        # class ids, counts, masks: exact, as the board gives them
        differing = np.argwhere(got != want)
        if not len(differing):
            return None
        at = tuple(differing[0])
        return (f"{len(differing)} element(s) differ, the first at {_index(at)}: "
                f"{got[at].item()!r}, expected {want[at].item()!r}")
    a, b = got.astype(np.float64), want.astype(np.float64)
    bad = (~np.isfinite(a) | ~np.isfinite(b)) & (a != b)  # NaN never agrees, itself included
    if bad.any():
        at = tuple(np.argwhere(bad)[0])
        return (f"{int(bad.sum())} NaN or infinite value(s) without agreement, the first at "
                f"{_index(at)}: actual {float(a[at]):.6g}, expected {float(b[at]):.6g}")
    cosine, max_abs, _ = compare_arrays(b, a)
    limit = gate.limit(b)
    failures = []
    if not cosine >= gate.min_cosine:
        failures.append(f"cosine {cosine:.6f} < {gate.min_cosine:g}")
    if not max_abs <= limit:
        failures.append(f"max abs error {max_abs:.4g} > {limit:.4g}")
    if not failures:
        return None
    diff = np.where(np.isfinite(a) & np.isfinite(b), np.abs(a - b), 0.0)
    at = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    worst = (f"; worst at {_index(at)}: actual {a[at]:.6g}, expected {b[at]:.6g}"
             if diff.size else "")
    return "; ".join(failures) + worst + f" (cosine {cosine:.6f}, max abs error {max_abs:.4g})"


def assert_replays(session: Session, recording: Recording | str, *,
                   min_cosine: float | None = None, max_abs_error: float | None = None) -> None:
    """Run ``session`` on a recording's inputs (``edgefuse run --record``) and assert its outputs
    match the recorded ones; FP16 gate when the recording or the session has board numerics."""
    golden = load_recording(recording)
    produced = replay_inputs(golden, session)
    fp16 = board_numerics(golden, session.backend)
    assert_outputs_close(produced, golden.outputs, min_cosine=min_cosine,
                         max_abs_error=max_abs_error, fp16=fp16,
                         what=f"{session.backend} outputs on {golden.describe()}")


def assert_detections_match(
    actual: Detections,
    expected: Detections,
    *,
    iou: float = 0.5,
    classes: bool = True,
    class_names: Sequence[str] = (),
    what: str = "detections",
) -> None:
    """Same number of boxes, each expected box matched by an actual one of the same class (unless
    ``classes`` is False) at IoU >= ``iou``, greedily by expected score."""
    matched, missing, extra = match_detections(actual, expected, iou, classes=classes)
    if not missing and not extra:
        return
    lines = [f"{what} differ (IoU >= {iou:g}{', same class' if classes else ''}): "
             f"{len(actual)} actual vs {len(expected)} expected, {len(matched)} matched"]
    overlaps = box_iou(expected.boxes, actual.boxes)
    for i in missing[:_LISTED]:
        lines.append(f"  missing: expected #{i} {_box(expected, i, class_names)}; "
                     + _best(overlaps[i], actual, "actual", class_names))
    for j in extra[:_LISTED]:
        lines.append(f"  extra: actual #{j} {_box(actual, j, class_names)}; "
                     + _best(overlaps[:, j], expected, "expected", class_names))
    left = max(len(missing) - _LISTED, 0) + max(len(extra) - _LISTED, 0)
    if left:
        lines.append(f"  ... and {left} more")
    raise AssertionError("\n".join(lines))


def _box(found: Detections, index: int, names: Sequence[str]) -> str:
    cls = int(found.classes[index])
    name = f" '{names[cls]}'" if cls < len(names) else ""
    box = ", ".join(f"{v:.1f}" for v in np.asarray(found.boxes[index], dtype=np.float64))
    return f"class {cls}{name} box [{box}] score {float(found.scores[index]):.3f}"


def _best(row: np.ndarray, other: Detections, side: str, names: Sequence[str]) -> str:
    if not len(other):
        return f"no {side} boxes at all"
    j = int(np.argmax(row))
    return f"best {side} overlap #{j} {_box(other, j, names)} at IoU {float(row[j]):.3f}"


def assert_masks_match(
    actual: Segmentation | np.ndarray,
    expected: Segmentation | np.ndarray,
    *,
    min_mean_iou: float = 0.9,
    num_classes: int | None = None,
    what: str = "masks",
) -> None:
    """The class maps' mean IoU (over classes present in either) is at least ``min_mean_iou``."""
    got, want = _class_map(actual), _class_map(expected)
    if got.shape != want.shape:
        raise AssertionError(f"{what} differ: shape {list(got.shape)}, expected "
                             f"{list(want.shape)}")
    classes = num_classes or max(_classes(actual), _classes(expected),
                                 int(max(got.max(initial=0), want.max(initial=0))) + 1)
    scores = mean_iou(want, got, classes)
    if scores["mean_iou"] >= min_mean_iou:
        return
    matrix = confusion(want, got, classes)
    tp = np.diag(matrix)
    union = matrix.sum(axis=0) + matrix.sum(axis=1) - tp
    present = np.flatnonzero(union)
    per_class = sorted(present, key=lambda c: tp[c] / union[c])
    lines = [f"{what} differ: mean IoU {scores['mean_iou']:.4f} < {min_mean_iou:g} (pixel "
             f"agreement {100 * scores['pixel_agreement']:.2f}%, {len(present)} class(es) "
             "present)"]
    for c in per_class[:_LISTED]:
        lines.append(f"  class {c}: IoU {tp[c] / union[c]:.4f} (expected {matrix[c].sum()} px, "
                     f"actual {matrix[:, c].sum()} px, {tp[c]} shared)")
    differing = np.argwhere(got != want)
    if len(differing):
        at = tuple(differing[0])
        lines.append(f"  {len(differing)} pixel(s) differ, the first at {_index(at)} (y, x): "
                     f"actual {int(got[at])}, expected {int(want[at])}")
    raise AssertionError("\n".join(lines))


def _class_map(value: Segmentation | np.ndarray) -> np.ndarray:
    array = value.class_map if isinstance(value, Segmentation) else np.asarray(value)
    if not np.issubdtype(array.dtype, np.integer) and array.dtype != np.bool_:
        raise TypeError(f"a mask must be a Segmentation or an integer class map, got "
                        f"{array.dtype}")
    return array.astype(np.int64)


def _classes(value: Any) -> int:
    return value.num_classes if isinstance(value, Segmentation) else 0


def _samples(value: Outputs | Sequence[Outputs]) -> list[Outputs]:
    return [value] if isinstance(value, Mapping) else list(value)


def _index(at: Sequence[Any]) -> str:
    return "[" + ", ".join(str(int(i)) for i in at) + "]"
