"""The demo's closing table: one column per model, one row per figure a user asks about."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgefuse.demo.clip_runs import ClipRun
from edgefuse.demo.head_parity import CRITERION, HeadParity
from edgefuse.demo.model_stages import SOC, PreparedModel
from edgefuse.demo.multi_camera import MultiCameraRun
from edgefuse.vision.streams.batching import describe_sizes

PREDICTED = "(host prediction)"  # marks every INT8 figure: no board has run an INT8 build
PREDICTION_NOTE = (
    "an INT8 figure no board has confirmed: the score of ONNX Runtime's QDQ emulation of ATC's "
    "INT8 calibration (calibration min/max, where CANN searches its ranges), the floor with "
    "Conv/Gemm/MatMul at the INT8 peak; on a board: edgefuse compile ... --int8 <model>/int8, "
    "run --record there, verify --against")


@dataclasses.dataclass(frozen=True)
class ModelOutcome:
    """A prepared model, its app run on the board's numerics and its FP32 reference run."""

    prepared: PreparedModel
    board_run: ClipRun
    reference_run: ClipRun
    metric: str  # "AP50" or "mIoU"
    fp32_score: float
    fp16_score: float
    files: tuple[Path, ...]
    floor_us: float | None = None  # the board's floor on the build's SoC (a lower bound)
    head_parity: HeadParity | None = None  # a build ending in the YoloHead: against host decode
    int8_score: float | None = None  # the host emulation of the board's INT8: a prediction
    int8_floor_us: float | None = None  # the floor with the quantized layers at the INT8 peak


def render(outcomes: list[ModelOutcome]) -> str:
    rows = [
        ("", [f"{o.prepared.name} ({o.prepared.task})" for o in outcomes]),
        ("nodes: export / convert / optimize", ["{} / {} / {}".format(*o.prepared.nodes)
                                                for o in outcomes]),
        ("BatchNorm folded", [str(o.prepared.batchnorms_folded) for o in outcomes]),
        ("parity: optimized vs export (cosine)", [f"{o.prepared.parity_cosine:.7f}"
                                                  for o in outcomes]),
        ("FP16 gate (cosine, clip frames)", [
            f"{o.prepared.fp16_cosine:.7f} {'PASSED' if o.prepared.fp16_passed else 'FAILED'}"
            for o in outcomes]),
        ("kept FP32", [", ".join(o.prepared.kept_fp32) or "nothing" for o in outcomes]),
        ("on-device decode + NMS (YoloHead)", [
            "none: the app decodes" if o.prepared.yolo_head is None else
            f"conf {o.prepared.yolo_head.score_threshold:g}, iou "
            f"{o.prepared.yolo_head.iou_threshold:g}, max_det {o.prepared.yolo_head.max_detections}"
            for o in outcomes]),
        ("YoloHead build vs host decode *", [
            "n/a" if o.head_parity is None else o.head_parity.describe() for o in outcomes]),
        ("on the clip's ground truth: FP32 -> FP16 -> INT8", [
            f"{o.metric} {o.fp32_score:.3f} -> {o.fp16_score:.3f} -> "
            + ("n/a" if o.int8_score is None else f"{o.int8_score:.3f} {PREDICTED}")
            for o in outcomes]),
        ("app fps (model-only ceiling)", [
            f"{o.board_run.stats.mean_fps:.0f} ({o.board_run.model_only_fps:.0f}) on "
            f"{o.board_run.backend}" for o in outcomes]),
        (f"floor on {SOC} (lower bound)", [
            "n/a" if o.floor_us is None else f"{o.floor_us / 1e3:.3f} ms per frame"
            for o in outcomes]),
        (f"floor on {SOC}, INT8 (lower bound)", [
            "n/a" if o.int8_floor_us is None else
            f"{o.int8_floor_us / 1e3:.3f} ms per frame {PREDICTED}" for o in outcomes]),
        ("board build", ["OM" if o.prepared.om_built else "compile.sh (no ATC here)"
                         for o in outcomes]),
    ]
    lines = _columns(rows)
    if any(o.head_parity is not None for o in outcomes):
        lines.append(f"* frames that agree: {CRITERION} (the FP16 build against the FP32 "
                     "model's host decode)")
    if any(o.int8_score is not None for o in outcomes):
        lines.append(f"{PREDICTED}: {PREDICTION_NOTE}")
    files = [str(path) for o in outcomes for path in o.files]
    return "\n".join([*lines, "", "wrote " + ", ".join(files)])


def render_cameras(run: MultiCameraRun) -> str:
    """The multi-camera step: one column per camera, counts and tracking against the truth."""
    cameras = run.cameras
    rows = [
        (f"multi-camera ({len(cameras)} streams, one session)",
         [c.camera.name for c in cameras]),
        ("clip, counting line", [
            f"clip {c.camera.clip_index}, ({c.camera.start[0]:g},{c.camera.start[1]:g})->"
            f"({c.camera.end[0]:g},{c.camera.end[1]:g})" for c in cameras]),
        ("line in / out: counted (true)", [
            f"{c.counted['in']} / {c.counted['out']} ({c.true['in']} / {c.true['out']})"
            for c in cameras]),
        ("tracking vs truth: IDF1 / MOTA", [f"{c.scores.idf1:.3f} / {c.scores.mota:.3f}"
                                            for c in cameras]),
        ("ID switches", [str(c.scores.id_switches) for c in cameras]),
        ("fps per stream", [f"{c.fps:.0f} on {run.backend}" for c in cameras]),
    ]
    files = [str(path) for c in cameras for path in c.files]
    batches = f"batches: {describe_sizes(run.batches)} ({run.batching})"
    return "\n".join([*_columns(rows), batches, "", "wrote " + ", ".join(files)])


def _columns(rows: list[tuple[str, list[str]]]) -> list[str]:
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(values[i]) for _, values in rows) for i in range(len(rows[0][1]))]
    lines = []
    for label, values in rows:
        cells = "   ".join(value.ljust(width) for value, width in zip(values, widths, strict=True))
        lines.append(f"{label.ljust(label_width)}   {cells}".rstrip())
    return lines
