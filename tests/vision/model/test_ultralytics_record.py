"""Reading the record Ultralytics writes into its ONNX exports, and where it stands: below
edgefuse's own app info and the config, above what the outputs' shapes tell."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, embed
from edgefuse.model_source import resolve_source
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.model import ultralytics_record
from edgefuse.vision.model.adapter import app_info_of
from tests.vision.models import constant_model

pytestmark = pytest.mark.ort

NAMES = "{0: 'person', 1: 'bicycle', 2: 'car'}"
# What Ultralytics 8.4.190 writes (engine/exporter.py, self.metadata), for a 3-class detector.
PROPS = {"description": "Ultralytics YOLOv8n model trained on coco.yaml", "author": "Ultralytics",
         "version": "8.4.190", "license": "AGPL-3.0 License", "stride": "32", "task": "detect",
         "head": "Detect", "batch": "1", "imgsz": "[64, 64]", "names": NAMES,
         "args": "{'batch': 1, 'simplify': True}", "channels": "3", "end2end": "False"}


def with_props(model: onnx.ModelProto, props: dict[str, str]) -> onnx.ModelProto:
    onnx.helper.set_model_props(model, props)
    return model


def detector_model(props: dict[str, str] = PROPS, rows: int = 7) -> onnx.ModelProto:
    """A constant [1, 4+3, 64] output behind a [1, 3, 64, 64] input."""
    output = np.zeros((1, rows, 64), np.float32)
    output[0, :4, 0] = [32, 32, 10, 10]
    output[0, 6, 0] = 0.9
    return with_props(constant_model(output, size=64), props)


def test_the_record_gives_names_size_letterbox_layout_and_the_family_defaults():
    record = ultralytics_record.read(detector_model())
    info = record.info
    assert info.classes == ("person", "bicycle", "car") and info.task == "detect"
    assert info.preprocess.size == (64, 64) and info.preprocess.resize == "letterbox"
    post = info.postprocess
    assert (post.layout, post.conf, post.iou, post.max_det) == ("yolov8", 0.25, 0.7, 300)
    assert (record.who, record.model) == ("Ultralytics 8.4.190", "YOLOv8n")


@pytest.mark.parametrize(("changes", "layout", "box_format", "resize"), [
    ({"head": "RTDETRDecoder", "end2end": "False"}, "end2end", "cxcywh", "stretch"),
    ({"head": "v10Detect", "end2end": "True"}, "end2end", "xyxy", "letterbox"),
    ({"head": "Detect", "end2end": "False"}, "yolov8", None, "letterbox"),
    ({"task": "segment", "head": "Segment"}, "yolov8_seg", None, "letterbox"),
    ({"end2end": None, "head": None}, None, None, "letterbox"),  # 8.1/8.2: the graph tells
])
def test_the_head_and_export_mode_decide_layout_box_format_and_resize(changes, layout,
                                                                     box_format, resize):
    props = {k: v for k, v in {**PROPS, **changes}.items() if v is not None}
    info = ultralytics_record.read(detector_model(props)).info
    assert (info.postprocess.layout, info.postprocess.box_format) == (layout, box_format)
    assert info.preprocess.resize == resize


@pytest.mark.parametrize(("key", "value", "message"), [
    ("names", "__import__('pathlib').Path('{tmp}/pwned').touch()",
     "'names' is not a dict literal"),
    ("names", "{0: 'a', 2: 'c'}", "number its classes 0 to 1"),
    ("names", "['a', 'b'", "'names' is not a dict literal"),
    ("names", "{'a': 0}", "must map class ids to names"),
    ("imgsz", "[64]", "'imgsz' is not a size"),
    ("end2end", "yes", "'end2end' is 'True' or 'False'"),
    ("task", "pose", "Ultralytics 'pose' model"),
])
def test_a_malformed_record_is_refused_saying_which_key(key, value, message, tmp_path):
    with pytest.raises(InputError, match=message) as caught:
        ultralytics_record.read(detector_model({**PROPS, key: value.replace("{tmp}",
                                                                            str(tmp_path))}))
    assert "Ultralytics metadata_props" in str(caught.value)
    assert not (tmp_path / "pwned").exists()


def test_a_model_from_elsewhere_has_no_record():
    assert ultralytics_record.read(detector_model({"author": "someone", "names": NAMES})) is None
    assert ultralytics_record.read(constant_model(np.zeros((1, 7, 64), np.float32))) is None


def test_edgefuse_app_info_wins_value_by_value_and_the_record_fills_the_rest():
    model = embed(detector_model(), AppInfo.from_dict({"postprocess": {"iou": 0.5}}))
    info = app_info_of(resolve_source(model))
    assert info.classes == ("person", "bicycle", "car")  # the app info has none: the record's
    assert (info.postprocess.iou, info.postprocess.conf) == (0.5, 0.25)
    decided = dict(info.decided_by)
    assert set(decided) == {"classes", "size", "resize", "layout", "thresholds"}
    named = embed(detector_model(), AppInfo.from_dict({"classes": ["a", "b", "c"]}))
    assert app_info_of(resolve_source(named)).classes == ("a", "b", "c")


def test_the_start_line_says_what_the_record_decided_and_flags_still_win():
    with Detector.open(detector_model(), backends="cpu") as detector:
        assert detector.class_names[:2] == ("person", "bicycle")
        assert detector.options.iou == 0.7
        note = detector.layout_note
    assert note.startswith("layout yolov8 (3 classes), set by the exporter's record "
                           "(Ultralytics 8.4.190, YOLOv8n: head Detect, end2end False)")
    assert "conf 0.25, iou 0.7, max_det 300, class-aware NMS (defaults from the exporter's " \
           "record)" in note
    assert note.endswith("class names, input size 64x64, letterbox from the exporter's record")
    with Detector.open(detector_model(), backends="cpu", iou=0.3, layout="yolov8",
                       class_names=["x", "y", "z"]) as detector:
        assert detector.options.iou == 0.3 and detector.class_names == ("x", "y", "z")
        assert "set by 'layout:' in the config" in detector.layout_note
        assert "iou 0.3 (config)" in detector.layout_note


def test_names_that_disagree_with_the_outputs_are_refused_before_any_frame():
    props = {**PROPS, "names": "{0: 'person', 1: 'car'}"}
    with pytest.raises(InputError, match="do not hold 2 classes"):
        Detector.open(detector_model(props), backends="cpu")


def yolo_head_model(props: dict[str, str]) -> onnx.ModelProto:
    """The four outputs of edgefuse's YoloHead (an Ultralytics export after ``optimize
    --yolo-head``), one detection of class 2, behind a [1, 3, 64, 64] input."""
    oh, nh = onnx.helper, onnx.numpy_helper
    nodes = [oh.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
             oh.make_node("Mul", ["mean", "zero"], ["nothing"]),
             oh.make_node("Add", ["boxes_v", "nothing"], ["boxes"]),
             oh.make_node("Add", ["scores_v", "nothing"], ["scores"]),
             oh.make_node("Identity", ["classes_v"], ["classes"]),
             oh.make_node("Identity", ["count_v"], ["num_detections"])]
    inits = [nh.from_array(np.array([[[8, 8, 24, 24], [0, 0, 0, 0]]], np.float32), "boxes_v"),
             nh.from_array(np.array([[0.9, 0.0]], np.float32), "scores_v"),
             nh.from_array(np.array([[2, 0]], np.int64), "classes_v"),
             nh.from_array(np.array([1], np.int64), "count_v"),
             nh.from_array(np.zeros((), np.float32), "zero")]
    float_out = onnx.TensorProto.FLOAT
    outputs = [oh.make_tensor_value_info("boxes", float_out, [1, 2, 4]),
               oh.make_tensor_value_info("scores", float_out, [1, 2]),
               oh.make_tensor_value_info("classes", onnx.TensorProto.INT64, [1, 2]),
               oh.make_tensor_value_info("num_detections", onnx.TensorProto.INT64, [1])]
    graph = oh.make_graph(nodes, "head", [oh.make_tensor_value_info("images", float_out,
                                                                    [1, 3, 64, 64])],
                          outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return with_props(model, props)


def test_outputs_changed_after_the_export_speak_for_themselves_and_keep_the_names():
    with Detector.open(yolo_head_model(PROPS), backends="cpu") as detector:
        assert detector.layout == "yolo_head"
        assert "the exporter's record says 'yolov8', which cannot read these outputs" in \
            detector.layout_note
        result = detector(np.full((64, 64, 3), 90, np.uint8))
        assert [detector.class_names[c] for c in result.classes] == ["car"]
    with pytest.raises(InputError, match="layout 'yolov8' cannot read"):  # a config still binds
        Detector.open(yolo_head_model(PROPS), backends="cpu", layout="yolov8")
