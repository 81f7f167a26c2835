"""The demo's order of work: both models through every stage, both apps over the clip, the
generated cameras through the detector at once (``edgefuse.demo.multi_camera``), the tables.

The apps run the compiled builds on the board itself where pyACL is, else on the host simulator
of the board (``sim``: the OM's inputs and outputs, FP16 numerics as the build's precision record
says), so the FP16 figures are the board's; the FP32 model runs on the CPU beside it as the
reference. The detector's build ends in the YoloHead op, so its run is also compared, frame by
frame, with the host decode of the FP32 model (``head_parity``). INT8 is scored on the host
emulation of the board's INT8 (ONNX Runtime QDQ, on the CPU) with its floor at the INT8 peak:
predictions, marked so in the table, until a board runs the INT8 build. Exit code 1 when a gate
failed, as ``verify`` does.
"""

from __future__ import annotations

from pathlib import Path

from edgefuse.demo.clip_runs import ClipRun, run_on_clip
from edgefuse.demo.clip_truth import clip_scenes, detection_ap50, segmentation_miou
from edgefuse.demo.head_parity import head_parity
from edgefuse.demo.model_stages import SOC, STEPS_PER_MODEL, prepare_model
from edgefuse.demo.multi_camera import run_cameras
from edgefuse.demo.progress import Steps
from edgefuse.demo.summary import ModelOutcome, render, render_cameras
from edgefuse.models.shapes import DETECTOR, SEGMENTER
from edgefuse.profile.run import profile
from edgefuse.runtime import probe
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.segment.segmenter import Segmenter

APPS = ((DETECTOR, Detector, "detect"), (SEGMENTER, Segmenter, "segment"))
STEPS = len(APPS) * (STEPS_PER_MODEL + 3) + 2  # + the clip's truth, the multi-camera step


def run_demo(workdir: Path, *, threads: int | None = None, max_frames: int | None = None,
             steps: Steps | None = None) -> int:
    """Everything into ``workdir``; prints the steps and the table; returns the exit code.
    ``max_frames``: the apps (and the scores) take the first frames of the clip only."""
    steps = steps or Steps(STEPS)
    board_backend = board_backend_here()
    prepared = [prepare_model(name, SAMPLE_CLIP, workdir, steps) for name, _, _ in APPS]
    with steps.step("render the clip's ground truth again from its seed") as step:
        truth = clip_scenes()[:max_frames]
        step.say(f"{len(truth)} frames, {sum(len(s.boxes) for s in truth)} labelled objects")
    outcomes = []
    for model, (name, kind, app) in zip(prepared, APPS, strict=True):
        video, jsonl = workdir / f"{app}.mp4", workdir / f"{app}.jsonl"
        with steps.step(f"{app} app over the clip on the {name} build") as step:
            board = run_on_clip(kind, model.build_dir, SAMPLE_CLIP, (board_backend,), save=video,
                                jsonl=jsonl, threads=threads, max_frames=max_frames,
                                progress=_ticker(step))
            step.say(f"{board.stats.frames} frames on {board.backend}: "
                     f"{board.stats.mean_fps:.0f} fps -> {video}, {jsonl}")
        with steps.step(f"{name}: FP32 on the CPU as the reference, both scored") as step:
            reference = run_on_clip(kind, model.optimized, SAMPLE_CLIP, ("cpu",),
                                    threads=threads, max_frames=max_frames,
                                    progress=_ticker(step))
            metric, fp32, fp16 = _scores(kind, reference, board, truth)
            # the roofline over the model's nodes from the SoC's published peaks: a lower
            # bound on the board's time, never a prediction (docs/profile.md)
            floor_us = profile(model.optimized, "cpu", runs=1, warmup=0, soc=SOC,
                               threads=threads).floor_us
            step.say(f"{metric}: FP32 {fp32:.3f}, FP16 build {fp16:.3f}")
            head = None
            if model.yolo_head is not None:
                head = head_parity(board.results, reference.results)
                step.say(f"YoloHead build vs host decode: {head.describe()} agree")
        with steps.step(f"{name}: INT8 host emulation over the clip (a prediction)") as step:
            emulated = run_on_clip(kind, model.int8_emulated, SAMPLE_CLIP, ("cpu",),
                                   threads=threads, max_frames=max_frames,
                                   progress=_ticker(step))
            int8 = _scores(kind, reference, emulated, truth)[2]
            # the same roofline with Conv/Gemm/MatMul at the INT8 peak (profile --precision int8)
            int8_floor_us = profile(model.optimized, "cpu", runs=1, warmup=0, soc=SOC,
                                    precision="int8", threads=threads).floor_us
            step.say(f"{metric}: INT8 emulated {int8:.3f}; floor at the INT8 peak "
                     f"{int8_floor_us / 1e3:.3f} ms")
        outcomes.append(ModelOutcome(model, board, reference, metric, fp32, fp16,
                                     (video, jsonl), floor_us, head, int8, int8_floor_us))
    cameras = run_cameras(prepared[0].build_dir, workdir, board_backend, steps,  # the detector
                          threads=threads)
    print()
    print(render(outcomes))
    print()
    print(render_cameras(cameras))
    return 0 if all(o.prepared.fp16_passed for o in outcomes) else 1


def board_backend_here() -> str:
    """``acl`` on a board, else ``sim``: asked once, so no run warns that it passed acl over."""
    return "acl" if probe("acl").ok else "sim"


def _scores(kind: type, reference: ClipRun, board: ClipRun, truth: list) -> tuple[str, float,
                                                                                   float]:
    if kind is Detector:
        return ("AP50", detection_ap50(reference.results, truth),
                detection_ap50(board.results, truth))
    classes = reference.results[0].num_classes
    return ("mIoU", segmentation_miou(reference.results, truth, classes),
            segmentation_miou(board.results, truth, classes))


def _ticker(step):
    return lambda snapshot: step.note(f"{snapshot.frames} frames, {snapshot.fps:.0f} fps")
