"""One trained model through the product, as a user's model would go: export -> convert ->
optimize (+ parity) -> FP16 calibrated on the clip (+ its gate) -> INT8 calibration on the clip
(ATC's calibration folder, ``quantize --int8``, and its host emulation) -> compile for the board.

The INT8 step writes what ATC quantizes with and the ONNX Runtime QDQ emulation of the board's
INT8 (``quantize --int8 --emulate``); the demo scores that emulation on the clip beside FP32 and
FP16. Its figures are predictions until a board runs the INT8 build (``compile --int8``): the
board builds of the demo stay FP16, which the board and the simulator both run.

The detector's board build ends in the YoloHead custom op (decode + NMS on the device, the
``optimize --yolo-head`` path with the thresholds of the model's app info), as a board user
would build it: the parity and FP16 gates judge the raw predictions, the build returns final
detections (app layout ``yolo_head``), and the demo checks them against the host decode.

Why the export is ``torch.onnx.export(dynamo=True, optimize=False)`` and not ``edgefuse
convert`` of the module: that graph, with every BatchNorm a node, is the kind of ONNX file users
hand over, and the one the optimizer has work on. The model's application info (classes,
letterbox, thresholds) is embedded at convert, so every later file and the BUILD_DIR carry it and
the FP16 step reads the clip through the same preprocessing the apps use.

The detector's export has a dynamic batch (``dynamic=True`` in Ultralytics' words), as most
exports users bring do; convert fixes it at the catalogue's batch 1 for the gates, with the
Reshapes still following the batch, so it compiles with batch gears (``BATCH_GEARS``) and the
multi-camera step runs its cameras as one batch on the one build.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import onnx

from edgefuse import model_info
from edgefuse._files import save_onnx
from edgefuse.acl.compile.compile import compile_model
from edgefuse.apps.models import catalogue_info
from edgefuse.convert import convert
from edgefuse.convert.torch_export import example_inputs_from_shapes, export_unfused
from edgefuse.demo.progress import Steps
from edgefuse.model_info import AppInfo
from edgefuse.models.catalogue import get_entry
from edgefuse.optimize import optimize
from edgefuse.optimize.append_yolo_head import YoloHeadOptions, append_yolo_head, yolo_head_options
from edgefuse.quantize import quantize
from edgefuse.quantize.int8 import write_int8_calibration
from edgefuse.verify import verify

SOC = "Ascend310B4"  # the Atlas 200I DK A2's chip
STEPS_PER_MODEL = 5
INT8_FOLDER = "int8"  # quantize --int8's -o in the model's folder
# The detector's --dynamic_batch_size gears: the multi-camera step runs its cameras' frames as
# one batch. The segmenter is exported and built at batch 1: no step of the demo batches it.
BATCH_GEARS = (1, 2, 4)


@dataclasses.dataclass(frozen=True)
class PreparedModel:
    """What the stages made of one model, and the figures each gate measured."""

    name: str
    task: str
    nodes: tuple[int, int, int]  # exported, converted, optimized
    batchnorms_folded: int
    parity_cosine: float  # optimized FP32 against the export, worst output and frame
    fp16_cosine: float  # FP16 (storage emulated) against FP32, worst judged output and frame
    fp16_passed: bool
    kept_fp32: tuple[str, ...]
    optimized: Path  # the FP32 model the host backends run
    build_dir: Path
    yolo_head: YoloHeadOptions | None  # a detector: the device-side decode + NMS its build ends in
    om_built: bool
    int8_calibration: Path  # ATC's calibration folder (compile --int8)
    int8_emulated: Path  # the host emulation of the board's INT8 (ONNX Runtime QDQ)
    int8_samples: int  # clip frames calibrated on


def prepare_model(name: str, clip: Path, workdir: Path, steps: Steps) -> PreparedModel:
    """Every stage of catalogue model ``name`` into ``workdir/name``, one progress step each."""
    entry = get_entry(name)
    info = catalogue_info(entry, "full")
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    gears = BATCH_GEARS if info.task == "detect" else None
    with steps.step(f"{name}: export as users hand it over (every BatchNorm a node)") as step:
        exported = export_unfused(entry.build(), example_inputs_from_shapes(
            {"input": entry.input_shape}), input_names=["input"], dynamic_batch=gears is not None)
        save_onnx(exported, folder / "export.onnx")
        step.say(f"{_count(exported)} -> {folder / 'export.onnx'}")
    with steps.step(f"{name}: convert, optimize, verify against the export") as step:
        converted = model_info.embed(convert(exported, inputs={"input": entry.input_shape}),
                                     info)
        save_onnx(converted, folder / "model.onnx")
        result = optimize(converted, output=folder / "opt.onnx",
                          report_path=folder / "optimize.json")
        fired = ", ".join(f"{rule_id} x{stats.applied}"
                          for rule_id, stats in result.report.rules.items() if stats.applied)
        step.say(f"{_count(converted)} after convert, {_count(result.model)} after optimize "
                 f"({fired})")
        step.note("verifying on frames of the clip")
        parity = verify(folder / "export.onnx", folder / "opt.onnx", inputs=clip,
                        preprocess=info.preprocess, json_path=folder / "verify.json")
        step.say(f"parity on {parity.samples} clip frames: worst cosine "
                 f"{_worst(parity.gated):.6f} ({'PASSED' if parity.passed else 'FAILED'})")
    with steps.step(f"{name}: FP16, calibrated on frames of the clip") as step:
        step.note("searching the layers that must stay FP32")
        fp16 = quantize(folder / "opt.onnx", output=folder / "fp16.onnx", inputs=clip,
                        report_path=folder / "fp16.json")
        report = fp16.report
        kept = tuple(report.keep_fp32["nodes"] + report.keep_fp32["op_types"])
        step.say(f"gate cosine >= {report.min_cosine}: worst {_worst(report.judged):.6f} "
                 f"({'PASSED' if report.passed else 'FAILED'}); kept FP32: "
                 f"{', '.join(kept) or 'nothing'}")
    with steps.step(f"{name}: INT8 calibration on frames of the clip, and its host "
                    "emulation") as step:
        calibration = folder / INT8_FOLDER
        if calibration.exists():  # a folder of an earlier run: written whole again
            shutil.rmtree(calibration)
        int8 = write_int8_calibration(folder / "opt.onnx", calibration, inputs=clip,
                                      infer_soc=SOC, emulate=True)
        step.say(f"{int8.samples} clip frames -> {calibration} (ATC quantizes with it: "
                 f"edgefuse compile ... --int8 {calibration}); host emulation (ONNX Runtime "
                 f"QDQ, a prediction until a board confirms it): {calibration / int8.emulated}")
    with steps.step(f"{name}: compile for {SOC}" + (f", batch gears {list(gears)}" if gears
                                                     else "")) as step:
        board_model, head = folder / "opt.onnx", board_head(info)
        if head is not None:  # after the gates: the raw predictions are what they judge
            board_model = folder / "opt_head.onnx"
            save_onnx(append_yolo_head(onnx.load(str(folder / "opt.onnx")), head), board_model)
            step.say(f"appended YoloHead (conf={head.score_threshold:g}, "
                     f"iou={head.iou_threshold:g}, max_det={head.max_detections}): decode + NMS "
                     f"on the device -> {board_model}")
        build = compile_model(board_model, SOC, folder / "build", keep_fp32=report.keep,
                              dynamic_batch=gears, overwrite=True)
        step.say(f"OM built: {build.om_path}" if build.om_path else
                 f"no ATC here: {build.output_dir} holds the prepared model and compile.sh "
                 "for a CANN host")
    return PreparedModel(
        name=name, task=entry.task,
        nodes=(len(exported.graph.node), len(converted.graph.node), len(result.model.graph.node)),
        batchnorms_folded=_batchnorms(converted) - _batchnorms(result.model),
        parity_cosine=_worst(parity.gated), fp16_cosine=_worst(report.judged),
        fp16_passed=report.passed, kept_fp32=kept, optimized=folder / "opt.onnx",
        build_dir=build.output_dir, om_built=build.om_path is not None, yolo_head=head,
        int8_calibration=calibration, int8_emulated=calibration / int8.emulated,
        int8_samples=int8.samples,
    )


def board_head(info: AppInfo) -> YoloHeadOptions | None:
    """A detector's YoloHead with its app info's thresholds (None keys: the op's defaults), the
    keys of ``optimize --yolo-head``; None for the other tasks."""
    if info.task != "detect":
        return None
    post = info.postprocess
    given = {"conf": post.conf, "iou": post.iou, "max_det": post.max_det}
    return yolo_head_options({k: v for k, v in given.items() if v is not None},
                             "the demo detector's app info")


def _count(model: onnx.ModelProto) -> str:
    return f"{len(model.graph.node)} nodes ({_batchnorms(model)} BatchNormalization)"


def _batchnorms(model: onnx.ModelProto) -> int:
    return sum(node.op_type == "BatchNormalization" for node in model.graph.node)


def _worst(outputs: list) -> float:
    return min((o.cosine for o in outputs), default=float("nan"))
