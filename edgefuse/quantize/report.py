"""What ``quantize`` decided and measured, as JSON for tools and as text for people.

Why a report and not just a model: the FP16 model is only half the decision. The compile stage
must reproduce the FP32 islands on the board (ATC's ``--keep_dtype`` and ``--modify_mixlist``,
read from ``keep_fp32`` and ``atc``), and a user whose model needed FP32 nodes must see which,
and why: the policy rule, the constant that does not fit FP16, the activation that overflowed on
the calibration inputs, or the search step that found it.

The compile stage reads exactly ``report["keep_fp32"] = {"nodes": [...], "op_types": [...]}``:
``nodes`` are ONNX node names (every node kept FP32), ``op_types`` the ONNX op types the user
asked to keep wholesale (their nodes are in ``nodes`` too).
"""

from __future__ import annotations

import dataclasses
import json

from edgefuse.acl.compile.precision import KeepFp32, KeepPlan
from edgefuse.quantize.policy import Decision
from edgefuse.reference.compare import OutputAgreement

# Where ATC documents the formats (CANN 8.x, atctool "--keep_dtype": one entry per line, an
# original-model op name, or OpType::<Ascend IR type>; "--modify_mixlist": black/white lists of
# Ascend IR op types, honoured only with allow_mix_precision / mixed_float16).
KEEP_DTYPE_DOC = ("https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/910/devaids/"
                  "atctool/atlasatcparam_16_0074.html")


@dataclasses.dataclass
class FoldedConstant:
    """A constant that does not fit FP16 and that optimize folded away (nothing to keep FP32)."""

    constant: str
    read_by: list[str]
    cause: str
    detail: str
    fate: str

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class QuantizeReport:
    settings: dict
    decisions: dict[str, Decision]
    op_types: list[str]
    folded_constants: list[FoldedConstant]
    conversion: dict
    gate: list[OutputAgreement]
    min_cosine: float
    optimize: dict
    search: dict | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    atc: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    # Outputs nearly constant on the calibration samples (name -> why): left out of the gate.
    degenerate: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def judged(self) -> list[OutputAgreement]:
        """The outputs the gate judges: those that vary on the calibration samples."""
        return [g for g in self.gate if g.name not in self.degenerate]

    @property
    def passed(self) -> bool:
        return bool(self.judged) and all(g.passed for g in self.judged)

    @property
    def keep_fp32(self) -> dict[str, list[str]]:
        return {"nodes": list(self.decisions), "op_types": list(self.op_types)}

    @property
    def keep(self) -> KeepFp32:
        """What compile must keep FP32 on the board: ``compile(..., keep_fp32=report.keep)``."""
        return KeepFp32(tuple(self.decisions), tuple(self.op_types))

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "degenerate_outputs": self.degenerate,
            "settings": self.settings,
            "keep_fp32": self.keep_fp32,
            "decisions": [d.to_json() for d in self.decisions.values()],
            "folded_constants": [f.to_json() for f in self.folded_constants],
            "conversion": self.conversion,
            "gate": {
                "min_cosine": self.min_cosine,
                "emulation": "fp16-storage",
                "outputs": [g.to_json() for g in self.gate],
            },
            "search": self.search,
            "notes": self.notes,
            "atc": self.atc,
            "optimize": self.optimize,
            "seconds": round(self.seconds, 3),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def render(self) -> str:
        conv = self.conversion
        lines = [
            f"quantize fp16: {conv['fp16_nodes']} nodes FP16, {len(self.decisions)} kept FP32, "
            f"{conv['casts_inserted']} Casts inserted ({self.seconds:.1f} s)",
        ]
        for folded in self.folded_constants:
            lines.append(
                f"  folded: constant '{folded.constant}' ({folded.cause}: {folded.detail}) "
                f"read by {', '.join(folded.read_by)}: {folded.fate}"
            )
        if self.decisions:
            lines.append("kept FP32:")
            width = max(len(d.node) for d in self.decisions.values())
            for decision in self.decisions.values():
                lines.append(
                    f"  {decision.node:<{width}}  {decision.op_type:<14}  {decision.rule:<24}  "
                    f"{decision.detail}"
                )
        if self.search is not None:
            lines.append(
                f"search: {self.search['evaluations']} evaluations in "
                f"{self.search['seconds']:.1f} s"
                + (f", stopped by {self.search['stopped_by']}" if self.search["stopped_by"] else "")
            )
        lines.append("outputs (FP16 storage emulated, lowest cosine over the calibration samples):")
        for gate in self.gate:
            verdict = "n/a" if gate.name in self.degenerate else "ok" if gate.passed else "FAIL"
            lines.append(
                f"  {gate.name}: cosine {gate.cosine:.6f}, max abs err {gate.max_abs_error:.4g}, "
                f"rel L2 {gate.rel_l2_error:.3g}  {verdict}"
            )
        lines += [f"note: {note}" for note in self.notes]
        lines += [f"note: output '{name}' is nearly constant on the calibration samples ({why}): "
                  "the gate leaves it out" for name, why in self.degenerate.items()]
        if self.gate and not self.judged:
            lines.append("INCONCLUSIVE: every output is nearly constant on the calibration "
                         "samples; calibrate on real data: --inputs with a folder of images, a "
                         "video or .npz files")
        else:
            verdict = "PASSED" if self.passed else "FAILED"
            lines.append(f"{verdict} (every output cosine >= {self.min_cosine})")
        return "\n".join(lines)


def atc_artifacts(plan: KeepPlan) -> dict:
    """What ATC needs to keep the same nodes FP32, from the compile stage's own planner.

    ``keep_dtype_cfg`` is the ``--keep_dtype`` file for ``--precision_mode=force_fp16`` (node
    names, one per line: ATC's op-name form); ``modify_mixlist`` the ``--modify_mixlist`` JSON for
    ``allow_mix_precision`` (Ascend IR types of the op types kept wholesale).
    """
    forced = plan.for_mode("force_fp16")
    mixed = plan.for_mode("allow_mix_precision")
    return {
        "precision_mode": "force_fp16",
        "keep_dtype_cfg": forced.keep_dtype_text or "",
        "modify_mixlist": mixed.mixlist or {"black-list": {"to-add": []}},
        "notes": [
            "keep_dtype entries are this model's ONNX node names; ATC ignores an entry whose node "
            "it fused away or split, so check the ATC log for unmatched names",
            "modify_mixlist applies only with --precision_mode=allow_mix_precision; it lists "
            "Ascend IR op types, so it keeps every node of a type, not single nodes",
            *forced.decisions["notes"],
        ],
        "doc": KEEP_DTYPE_DOC,
    }
