"""Automatic mixed INT8/FP16: a hand-made model with one layer INT8 cannot survive, the gate, the
report of what each kept layer buys, the CLI; and the demo detector end to end."""

import json

import cv2
import numpy as np
import onnx
import pytest

from edgefuse import model_info
from edgefuse.apps.models import catalogue_info
from edgefuse.cli.main import main
from edgefuse.convert import convert
from edgefuse.errors import InputError
from edgefuse.models import shapes
from edgefuse.models.catalogue import get_entry
from edgefuse.quantize.int8 import write_int8_calibration
from edgefuse.quantize.int8_emulate import Int8Emulation
from edgefuse.quantize.int8_mixed import choose_fp16_layers
from edgefuse.reference.onnx_runner import run_onnx, with_outputs
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from tests.quantize.graphs import conv_net, make_model, node
from tests.quantize.test_int8_calibration import PHOTOS, STRETCH, _photos

CLASSES = 8


def sensitive_net(seed: int = 0) -> onnx.ModelProto:
    """conv1 -> relu -> conv2 -> relu -> conv3 -> GAP: channel 0 of r2 is 1000 x r1[0] and conv3
    ignores it. Per-tensor INT8 of r2 (conv3's input) takes a scale of about max(r2) / 255, which
    is larger than every other channel of r2: they round to the zero point, conv3 sees zeros and
    the class decisions are gone. conv1 and conv2 read ordinary ranges."""
    rng = np.random.default_rng(seed)
    w2 = (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)
    w2[0] = 0
    w2[0, 0] = 1000.0
    w3 = rng.standard_normal((CLASSES, 8, 1, 1)).astype(np.float32)
    w3[:, 0] = 0
    weights = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.5).astype(np.float32),
               "w2": w2, "w3": w3}
    nodes = [node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             node("Relu", ["c2"], ["r2"], name="relu2"),
             node("Conv", ["r2", "w3"], ["c3"], name="conv3"),
             node("GlobalAveragePool", ["c3"], ["g"], name="gap"),
             node("Flatten", ["g"], ["y"], name="flatten")]
    return make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, CLASSES]}, weights)


def _samples() -> list[dict[str, np.ndarray]]:
    return [{"x": STRETCH(cv2.imread(str(p)))[0]} for p in _photos()]


@pytest.mark.ort
def test_the_hand_made_sensitive_layer_is_kept_and_nothing_else(tmp_path):
    samples = _samples()
    emulation = Int8Emulation(sensitive_net(), samples, op_types={"Conv"})
    # The premise, checked: conv3's input scale swallows every channel of r2 but the first.
    r2 = np.concatenate([_r2(s) for s in samples])
    assert emulation.ranges["r2"].scale / 2 > np.abs(r2[:, 1:]).max()
    out = tmp_path / "q"
    written = write_int8_calibration(sensitive_net(), out, inputs=PHOTOS, preprocess=STRETCH,
                                     keep_fp16=["auto"], task="classify")
    mixed = written.mixed
    assert written.keep_fp16 == ("conv3",) == mixed.keep
    assert (mixed.fp16, mixed.all_int8, mixed.mixed) == (1.0, 0.0, 1.0) and mixed.passed
    # Sensitivity: conv3 alone INT8 loses every decision; conv1 and conv2 alone lose none.
    alone = {s.node: s.metric_alone for s in mixed.sensitivity}
    assert alone == {"conv3": 0.0, "conv1": 1.0, "conv2": 1.0}
    assert mixed.sensitivity[0].node == "conv3"
    # What conv3 buys: top-1 1.0 with it FP16, 0.0 if it were INT8.
    (kept,) = mixed.kept
    assert (kept.node, kept.metric_with, kept.metric_without) == ("conv3", 1.0, 0.0)
    # The board gets the same choice: skip_layers names the ONNX node; the report is on disk.
    assert 'skip_layers: "conv3"' in (out / "simple_config.cfg").read_text()
    report = json.loads((out / "int8_report.json").read_text())
    assert report["keep_fp16"] == ["conv3"] and report["kept"][0]["buys_points"] == 100.0
    assert "until a board confirms" in report["note"]
    record = json.loads((out / "int8.json").read_text())
    assert record["keep_fp16"] == ["conv3"] and record["automatic_keep_fp16"]["passed"]
    # The emulated model written is the mixed one: conv3 reads r2 itself, in float.
    emulated = onnx.load(out / "host_int8.qdq.onnx")
    conv3 = next(n for n in emulated.graph.node if n.name == "conv3")
    assert list(conv3.input) == ["r2", "w3"]


def _r2(sample: dict[str, np.ndarray]) -> np.ndarray:
    return run_onnx(with_outputs(sensitive_net(), ["r2"]), sample)["r2"]


@pytest.mark.ort
def test_the_gate_decides_and_user_layers_stay_kept():
    samples = _samples()
    emulation = Int8Emulation(sensitive_net(), samples, op_types={"Conv"})
    # A gate of 100 points accepts anything: nothing is kept.
    assert choose_fp16_layers(emulation, samples, task="classify", max_drop=100).keep == ()
    # Layers the user names are kept beside the chosen ones, and say so.
    both = choose_fp16_layers(emulation, samples, task="classify", forced=["conv1"])
    assert both.keep == ("conv1", "conv3")
    assert {k.node: k.reason for k in both.kept} == {"conv1": "user", "conv3": "search"}
    # A benign model passes all-INT8: nothing kept, no sensitivity pass needed.
    benign = Int8Emulation(conv_net(), samples, op_types={"Conv"})
    result = choose_fp16_layers(benign, samples, task="classify")
    assert result.keep == () and result.passed and result.sensitivity == []


@pytest.mark.ort
def test_cli_chooses_by_task_says_what_it_buys_and_exits_1_when_the_search_is_cut(
        tmp_path, capsys):
    model = tmp_path / "net.onnx"
    onnx.save(sensitive_net(), model)
    args = ["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "--task", "classify"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "kept FP16 conv3" in printed and "+100.00 points" in printed
    assert "until a board confirms it" in printed
    # One evaluation allowed: the gate is not reached, the folder still written, exit 1.
    assert main([*args, "-o", str(tmp_path / "b"), "--max-evaluations", "1"]) == 1
    assert "stopped by its max-evaluations bound" in capsys.readouterr().out
    # No task anywhere: the default keeps nothing and says why; an explicit auto is refused.
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o",
                 str(tmp_path / "c")]) == 0
    assert "no task known" in capsys.readouterr().out
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o",
                 str(tmp_path / "d"), "--keep-fp16", "auto"]) == 2
    assert "error[unknown-task]" in capsys.readouterr().err


@pytest.mark.ort
def test_auto_without_a_task_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(InputError, match="needs the task"):
        write_int8_calibration(sensitive_net(), tmp_path / "q", inputs=PHOTOS,
                               preprocess=STRETCH, keep_fp16=["auto"])
    with pytest.raises(InputError, match="positive time budget"):
        write_int8_calibration(sensitive_net(), tmp_path / "q", inputs=PHOTOS,
                               preprocess=STRETCH, keep_fp16=["auto"], task="classify",
                               budget_s=0)
    with pytest.raises(InputError, match="none cannot be combined"):
        write_int8_calibration(sensitive_net(), tmp_path / "q", inputs=PHOTOS,
                               preprocess=STRETCH, keep_fp16="none,conv1")
    assert not (tmp_path / "q").exists()


@pytest.mark.torch
@pytest.mark.slow
def test_the_demo_detector_on_its_clip(tmp_path):
    entry = get_entry(shapes.DETECTOR)
    model = model_info.embed(convert(entry.build(), inputs={"input": entry.input_shape}),
                             catalogue_info(entry, "full"))
    written = write_int8_calibration(model, tmp_path / "q", inputs=SAMPLE_CLIP,
                                     keep_fp16=["auto"])  # the task from the app info
    mixed = written.mixed
    assert mixed.task == "detect" and mixed.metric == "AP50" and mixed.samples == 16
    assert mixed.passed and mixed.mixed >= mixed.fp16 - 0.01
    assert set(mixed.keep) <= set(written.keep_fp16)
    assert (tmp_path / "q" / "host_int8.qdq.onnx").is_file()


@pytest.mark.ort
def test_the_time_budget_bounds_the_sensitivity_pass():
    samples = _samples()
    emulation = Int8Emulation(sensitive_net(), samples, op_types={"Conv"})
    cut = choose_fp16_layers(emulation, samples, task="classify", budget_s=1e-9)
    assert cut.sensitivity == [] and cut.stopped_by == "time-budget" and not cut.passed
