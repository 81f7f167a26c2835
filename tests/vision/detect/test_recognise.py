"""Telling detector layouts apart, and refusing what no layout reads, before the first frame."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import numpy_helper

from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, embed
from edgefuse.runtime import open_session
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.detect.graph_tail import Tail, tails
from edgefuse.vision.detect.recognise import Evidence, bind, recognise
from tests.needs import optional
from tests.vision.models import constant_model

pytestmark = pytest.mark.ort

cv2 = optional("cv2")

EXPORTS = Path(__file__).parent / "exporters"
SIZE = (160, 160)  # YOLOX grid at 8/16/32: 400 + 100 + 25 = 525 rows
RAW = Tail(frozenset({"Sigmoid", "Concat", "Reshape", "Transpose"}), False, "Concat")
DECODED = Tail(frozenset({"Sigmoid", "Add", "Mul", "Exp", "Concat"}), True, "Concat")
SELECTED = Tail(frozenset({"TopK", "GatherElements", "Concat"}), False, "Concat", "Mul")
DETR_SELECTED = Tail(frozenset({"TopK", "GatherElements", "Sigmoid", "Concat"}), False, "Concat",
                     "Sigmoid")


def layout_of(outputs, classes=None, tails=None, strides=None, box_format=None):
    found = recognise(outputs, Evidence(SIZE, classes, strides, tails, box_format))
    return None if found is None else found[0]


@pytest.mark.parametrize(("outputs", "classes", "tails", "layout"), [
    ([("o", (1, 84, 525), "float32")], None, None, "yolov8"),
    ([("o", (1, 1575, 85), "float32")], None, None, "yolov5"),  # 3 anchors: not a YOLOX grid
    ([("o", (1, 525, 85), "float32")], None, {"o": RAW}, "yolox"),
    ([("o", (1, 525, 85), "float32")], None, {"o": DECODED}, "yolov5"),
    ([("o", (1, 300, 6), "float32")], 80, {"o": SELECTED}, "end2end"),  # not 5 + 1 columns
    ([("o", (1, 300, 6), "float32")], None, {"o": SELECTED}, "end2end"),
    ([("o", (1, 300, 6), "float32")], None, {"o": DECODED}, "yolov5"),
    ([("pred_logits", (1, 300, 80), "float32"), ("pred_boxes", (1, 300, 4), "float32")],
     None, None, "end2end"),
    ([("boxes", (1, 525, 4), "float32"), ("scores", (1, 80, 525), "float32")], None, None,
     "ppyoloe"),
    ([("o", (1, 6, 4), "float32")], 2, None, "yolov8"),  # N < 4 + C: only the class count tells
    ([("o", (1, 64, 64, 2), "float32")], None, None, None),  # not a detector: left to others
])
def test_layouts_from_shapes_names_and_graph(outputs, classes, tails, layout):
    assert (None if (h := layout_of(outputs, classes, tails)) is None else h.layout) == layout


def test_picodet_scores_that_end_in_sqrt_are_told_from_the_dfl_distributions():
    """PaddleDetection's PicoDet export (the aligned head: sqrt of the class and quality
    scores) ends its class scores in Sqrt: an activation. With 8 classes both outputs of a
    stride are multiples of 4, and only that tells the scores from the distributions."""
    paddle = onnx.load(EXPORTS / "paddle" / "picodet_raw" / "model.onnx")
    read = tails(paddle)
    assert [read[f"fetch_name_{i}"].first_compute for i in range(8)] == ["Sqrt"] * 4 + ["Add"] * 4
    assert [read[f"fetch_name_{i}"].activated for i in range(8)] == [True] * 4 + [False] * 4
    rows = (400, 100, 25, 9)  # 160 x 160 at strides 8, 16, 32, 64
    outputs = [(f"d{n}", (1, n, 32), "float32") for n in rows] + [
        (f"s{n}", (1, n, 8), "float32") for n in rows]
    graph = {**{f"s{n}": read["fetch_name_0"] for n in rows},
             **{f"d{n}": read["fetch_name_4"] for n in rows}}
    heads = layout_of(outputs, tails=graph)
    assert heads.layout == "ppyoloe" and heads.form == "pico"
    assert heads.names == tuple(f"s{n}" for n in rows) + tuple(f"d{n}" for n in rows)


def test_detr_scores_are_logits_by_graph_else_by_name():
    outputs = [("a", (1, 100, 5), "float32"), ("b", (1, 100, 4), "float32")]
    activated = Tail(frozenset({"Sigmoid"}), False, "Sigmoid")
    linear = Tail(frozenset({"Add"}), True, "Add")
    assert layout_of(outputs, tails={"a": activated, "b": activated}).logits is False
    assert layout_of(outputs, tails={"a": linear, "b": activated}).logits is True
    named = [("pred_logits", (1, 100, 5), "float32"), ("pred_boxes", (1, 100, 4), "float32")]
    assert layout_of(named).logits is True
    assert layout_of([("scores", (1, 100, 5), "float32"), named[1]]).logits is False
    with pytest.raises(InputError, match="logits or probabilities"):
        layout_of(outputs)  # neither graph nor name says: no guess


@pytest.mark.parametrize(("tail", "declared", "box_format"), [
    (SELECTED, None, "xyxy"),  # boxes decoded by the stride Mul: YOLOv10 / YOLO26 end2end
    (DETR_SELECTED, None, "cxcywh"),  # boxes out of a Sigmoid: Ultralytics' RT-DETR
    (DETR_SELECTED, "xyxy", "xyxy"),  # declared (config, app info, exporter's record) wins
    (None, "cxcywh", "cxcywh"),
])
def test_end2end_box_formats_come_from_the_declaration_else_the_graph(tail, declared,
                                                                       box_format):
    tails = None if tail is None else {"o": tail}
    heads = layout_of([("o", (1, 300, 6), "float32")], 80, tails, box_format=declared)
    assert (heads.layout, heads.form, heads.box_format) == ("end2end", "k6", box_format)


@pytest.mark.parametrize("tails", [None, {"o": SELECTED.__class__(SELECTED.ops, False, "Concat",
                                                                    "Exp")}])
def test_end2end_boxes_nothing_tells_are_refused_naming_both_formats(tails):
    with pytest.raises(InputError, match=r"x1, y1, x2, y2 in input pixels .* or normalised cx, "
                                         r"cy, w, h") as caught:
        layout_of([("o", (1, 300, 6), "float32")], 80, tails)
    assert "box_format: xyxy' or 'box_format: cxcywh" in caught.value.hint
    with pytest.raises(InputError, match="normalised cx, cy, w, h"):
        bind("end2end", [("o", (1, 300, 6), "float32")], Evidence(SIZE, 80, None, tails))


@pytest.mark.parametrize(("outputs", "tails", "candidates"), [
    ([("o", (1, 525, 85), "float32")], None, "'yolov5' .* and 'yolox'"),
    ([("o", (1, 300, 6), "float32")], None, "'yolov5' .* and 'end2end'"),
])
def test_layouts_the_graph_does_not_tell_apart_are_refused_naming_the_key(outputs, tails,
                                                                          candidates):
    with pytest.raises(InputError, match=candidates) as caught:
        layout_of(outputs, tails=tails)
    assert "set 'layout:'" in caught.value.hint


def test_a_class_count_that_disagrees_with_the_class_names_is_refused():
    with pytest.raises(InputError, match="do not hold 2 classes.*as yolov8 it has 80"):
        layout_of([("o", (1, 84, 525), "float32")], classes=2)
    with pytest.raises(InputError, match="do not hold 2 classes.*as yolov8 it has 80"):
        bind("yolov8", [("o", (1, 84, 525), "float32")], Evidence(SIZE, 2))


# ---- through the Detector and the app: before the first frame, exit 2 ----------------------------


@pytest.mark.parametrize(("shape", "info", "message"), [
    ((1, 64, 4), None, "fit no detector layout"),
    ((1, 4, 64), None, "fit no detector layout"),
    ((1, 3, 64), {"postprocess": {"layout": "yolov8"}},
     r"layout 'yolov8' cannot read .*\[1,3,64\].*at least one class row"),
    ((1, 10, 64), {"classes": ["a", "b"]}, "do not hold 2 classes.*as yolov8 it has 6"),
    ((1, 10, 64), {"classes": ["a", "b"], "postprocess": {"layout": "yolov8"}},
     "do not hold 2 classes"),
])
def test_outputs_no_layout_reads_are_refused_when_the_model_opens(shape, info, message):
    model = constant_model(np.zeros(shape, np.float32))
    if info is not None:
        model = embed(model, AppInfo.from_dict(info))
    with pytest.raises(InputError, match=message):
        Detector.open(model, backends="cpu")


def test_the_app_exits_2_naming_what_it_found_and_what_to_set(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(constant_model(np.zeros((1, 3, 64), np.float32)), path)
    image = tmp_path / "frame.png"
    image.write_bytes(_png())
    code = main(["detect", "--model", str(path), "--source", str(image), "--layout", "yolov8",
                 "--backend", "cpu", "--stats-every", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "error[bad-layout]: layout 'yolov8' cannot read the outputs" in err
    assert "float32[1,3,64]" in err and "hint:" in err


def test_the_chosen_layout_is_said_at_start_and_in_every_record(tmp_path, capsys):
    out = np.zeros((1, 7, 64), np.float32)  # yolov8 with 3 classes, one box
    out[0, :4, 0], out[0, 5, 0] = [16, 16, 8, 8], 0.9
    path, log = tmp_path / "m.onnx", tmp_path / "out.jsonl"
    onnx.save(constant_model(out), path)
    image = tmp_path / "frame.png"
    image.write_bytes(_png())
    assert main(["detect", "--model", str(path), "--source", str(image), "--jsonl", str(log),
                 "--backend", "cpu", "--stats-every", "0"]) == 0
    err = capsys.readouterr().err
    assert "layout yolov8 (3 classes), told from the output shapes" in err
    record = json.loads(log.read_text().splitlines()[0])
    assert record["layout"] == "yolov8" and record["detections"][0]["class"] == "class1"


def test_a_session_without_graph_still_takes_a_declared_layout(tmp_path):
    out = np.zeros((1, 7, 64), np.float32)
    with open_session(constant_model(out), "cpu") as session:
        detector = Detector(session, layout="yolov8")
        assert detector.layout == "yolov8" and detector.heads.num_classes == 3
        assert detector.layout_note == (
            "layout yolov8 (3 classes), set by 'layout:' in the config; conf 0.25, iou 0.45, "
            "max_det 300, class-aware NMS (defaults from edgefuse)")


def _png() -> bytes:
    ok, data = cv2.imencode(".png", np.full((32, 32, 3), 90, np.uint8))
    assert ok
    return data.tobytes()


@pytest.mark.parametrize("layout", [None, "yolov8"])
def test_dynamic_output_shapes_are_bound_after_one_run(layout):
    """Rows tiled by the (dynamic) input width x 2: the output's last axis is known after a run."""
    column = np.zeros((1, 7, 1), np.float32)
    column[0, 4] = 0.9
    nodes = [
        oh.make_node("Shape", ["images"], ["shape"]),
        oh.make_node("Gather", ["shape", "three"], ["width"]),
        oh.make_node("Mul", ["width", "two"], ["rows"]),
        oh.make_node("Concat", ["ones", "rows"], ["repeats"], axis=0),
        oh.make_node("Tile", ["column", "repeats"], ["output0"]),
    ]
    inits = [numpy_helper.from_array(column, "column"),
             numpy_helper.from_array(np.array([3], np.int64), "three"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([1, 1], np.int64), "ones")]
    graph = oh.make_graph(nodes, "dynamic", [oh.make_tensor_value_info(
        "images", onnx.TensorProto.FLOAT, [1, 3, 32, "width"])], [oh.make_tensor_value_info(
            "output0", onnx.TensorProto.FLOAT, [1, 7, "rows"])], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)
    with Detector.open(model, backends="cpu", layout=layout,
                       preprocess={"size": [32, 32]}) as detector:
        assert not isinstance(detector.session.outputs[0].shape[2], int)
        assert detector.layout == "yolov8" and detector.heads.num_classes == 3


def test_the_issues_one_class_yolox_tiny_is_yolox_by_graph_and_refused_without():
    """[1, 3549, 6] at 416 x 416 fits yolox, yolov5 (one class) and end2end (K x 6)."""
    outputs = [("output", (1, 3549, 6), "float32")]
    found, why = recognise(outputs, Evidence((416, 416), tails={"output": RAW}))
    assert found.layout == "yolox" and "no TopK" in why and "undecoded" in why
    with pytest.raises(InputError, match="'yolov5' .* and 'yolox' .* and 'end2end'"):
        recognise(outputs, Evidence((416, 416)))
