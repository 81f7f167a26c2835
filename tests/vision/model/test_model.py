"""Detector and Segmenter over tiny ONNX models and AIPP builds: app info, layouts, wrong kinds,
and AIPP frames that are normalised exactly once."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model
from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, embed
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.segment.segmenter import Segmenter
from tests.acl.models import hide_atc
from tests.needs import optional
from tests.vision.models import (
    channel_logits_model,
    constant_model,
    red_mask_model,
    yolov8_output,
)

pytestmark = pytest.mark.ort

optional("cv2")

SOC = "Ascend310B4"


def two_reds(height: int = 32, width: int = 32) -> np.ndarray:
    """BGR frame: red 100 on the left half, red 200 on the right; blue 250 everywhere."""
    frame = np.zeros((height, width, 3), np.uint8)
    frame[..., 0] = 250
    frame[:, :width // 2, 2], frame[:, width // 2:, 2] = 100, 200
    return frame


def test_the_app_info_in_the_onnx_drives_the_detector():
    info = AppInfo.from_dict({
        "task": "detect", "classes": ["circle", "square"],
        "preprocess": {"size": [32, 32], "pad_value": 0, "center": False},
        "postprocess": {"layout": "yolov8", "conf": 0.75},
    })
    with Detector.open(embed(constant_model(yolov8_output()), info), backends="cpu") as detector:
        assert detector.class_names == ("circle", "square") and detector.options.conf == 0.75
        result = detector(np.zeros((16, 64, 3), np.uint8))  # r = 0.5, top-left: no pad offset
        np.testing.assert_allclose(result.boxes, [[16, 16, 48, 16]])  # clipped to 16 rows
        assert detector.describe(result) == {"layout": "yolov8", "detections": [
            {"class": "circle", "class_id": 0, "score": 0.9, "box": [16.0, 16.0, 48.0, 16.0]}]}


def test_without_app_info_the_layout_comes_from_the_shape_and_names_are_numbered():
    with Detector.open(constant_model(yolov8_output()), backends="cpu", conf=0.5) as detector:
        assert detector.layout == "yolov8" and detector.class_names == ("class0", "class1")
        assert detector.plan.preprocess.size == (32, 32)
        assert len(detector(np.zeros((32, 32, 3), np.uint8))) == 2


@pytest.mark.parametrize(("open_task", "model", "message", "hint"), [
    (Detector.open, constant_model(np.zeros((1, 10))), r"not a detection model: .*float32\[1,10\]"
                                                       r" reads as a classification model",
     "give a detector"),
    (Detector.open, channel_logits_model(), "not a detection model: .*segmentation model",
     "run it with `edgefuse segment` (in code, Segmenter.open)"),
    (Segmenter.open, constant_model(yolov8_output()), "not a segmentation model",
     "run it with `edgefuse detect` (in code, Detector.open); if it is not, give a segmentation"),
    (Detector.open, embed(channel_logits_model(), AppInfo(task="segment")),
     "its app info says task 'segment'", "run it with `edgefuse segment`"),
])
def test_a_model_of_the_wrong_kind_is_refused_and_the_other_app_named(open_task, model, message,
                                                                      hint):
    with pytest.raises(InputError, match=message) as refused:
        open_task(model, backends="cpu")
    assert hint in refused.value.hint


def test_a_preprocess_record_that_does_not_fit_the_input_is_refused():
    info = AppInfo.from_dict({"preprocess": {"size": [64, 64]}})
    with pytest.raises(InputError, match=r"makes float32\[1,3,64,64\] but the model takes "
                                         r"float32\[1,3,32,32\]"):
        Segmenter.open(embed(channel_logits_model(), info), backends="cpu")


def test_a_dynamic_input_needs_a_size():
    model = channel_logits_model()
    for dim in (2, 3):
        model.graph.input[0].type.tensor_type.shape.dim[dim].dim_param = "side"
        model.graph.output[0].type.tensor_type.shape.dim[dim].dim_param = "side"
    with pytest.raises(InputError, match="no fixed height and width"):
        Segmenter.open(model, backends="cpu")
    with Segmenter.open(model, backends="cpu", preprocess={"size": [16, 16]}) as segmenter:
        result = segmenter(two_reds())
    assert result.class_map.shape == (32, 32) and result.num_classes == 3


def test_the_red_mask_reads_the_red_channel_once_normalised():
    with Segmenter.open(red_mask_model(), backends="cpu", class_names=["red"]) as segmenter:
        assert segmenter.class_names == ("background", "red")
        result = segmenter(two_reds())
    # 100/255 - 0.5 < 0: background; 200/255 - 0.5 > 0: red. Blue (250) is not read.
    assert (result.class_map[:, :16] == 0).all() and (result.class_map[:, 16:] == 1).all()
    assert segmenter.describe(result) == {"layout": "seg_sigmoid",
                                          "pixels": {"background": 512, "red": 512},
                                          "foreground_pixels": 512}


def aipp_build(tmp_path, monkeypatch, spec: AippSpec, size: int = 32):
    hide_atc(monkeypatch)
    onnx.save(red_mask_model(size), tmp_path / "mask.onnx")
    out = tmp_path / "build"
    compile_model(tmp_path / "mask.onnx", SOC, out, aipp=spec)
    return out


@pytest.mark.parametrize("frame_size", [(32, 32), (48, 64)])
def test_an_aipp_build_takes_uint8_frames_and_normalises_once(tmp_path, monkeypatch, frame_size):
    spec = AippSpec(input_format="BGR888", source_size=(32, 32), scale=(1 / 255,) * 3)
    build = aipp_build(tmp_path, monkeypatch, spec)
    frame = two_reds(*frame_size)
    with Segmenter.open(build, backends="cpu") as on_frames:
        plan = on_frames.plan
        assert plan.aipp and plan.name == "images"
        assert (plan.preprocess.dtype, plan.preprocess.layout, plan.preprocess.color) == (
            "uint8", "NHWC", "BGR")
        feeds, _ = on_frames.preprocess(frame)
        assert feeds["images"].dtype == np.uint8 and feeds["images"].shape == (1, 32, 32, 3)
        via_aipp = on_frames(frame)
    with Segmenter.open(red_mask_model(), backends="cpu") as on_host:
        on_tensor = on_host(frame)
    assert np.array_equal(via_aipp.class_map, on_tensor.class_map)
    half = frame_size[1] // 2
    assert (via_aipp.class_map[:, :half] == 0).all() and (via_aipp.class_map[:, half:] == 1).all()


def test_an_aipp_crop_gets_the_fitted_frame_at_its_place(tmp_path, monkeypatch):
    spec = AippSpec(input_format="RGB888", source_size=(40, 36), crop=(4, 2, 32, 32),
                    scale=(1 / 255,) * 3)
    build = aipp_build(tmp_path, monkeypatch, spec)
    frame = two_reds()
    with Segmenter.open(build, backends="cpu") as segmenter:
        assert segmenter.plan.canvas == (36, 40, 4, 2)
        feeds, _ = segmenter.preprocess(frame)
        image = feeds["images"][0]
        assert image.shape == (36, 40, 3) and (image[0] == 114).all()
        assert np.array_equal(image[2:34, 4:36], frame[..., ::-1])  # RGB888: channels swapped
        result = segmenter(frame)
    assert (result.class_map[:, :16] == 0).all() and (result.class_map[:, 16:] == 1).all()


@pytest.mark.parametrize("input_format", ["YUV420SP", "YVU420SP"])
def test_a_yuv420sp_aipp_build_is_fed_nv12_bytes_of_the_frame(tmp_path, monkeypatch,
                                                              input_format):
    spec = AippSpec(input_format=input_format, source_size=(32, 32), scale=(1 / 255,) * 3)
    build = aipp_build(tmp_path, monkeypatch, spec)
    frame = two_reds()
    with Segmenter.open(build, backends="cpu") as segmenter:
        feeds, _ = segmenter.preprocess(frame)
        assert feeds["images"].dtype == np.uint8 and feeds["images"].shape == (1, 48, 32)
        seen = spec.emulate(feeds["images"][0], layout="NHWC")[0] * 255  # back to RGB pixels
        np.testing.assert_allclose(seen, frame[..., ::-1], atol=3)
        result = segmenter(frame)
    assert (result.class_map[:, :16] == 0).all() and (result.class_map[:, 16:] == 1).all()


def test_app_info_records_are_checked():
    with pytest.raises(InputError, match="(?s)unknown key 'clases'.*did you mean 'classes'"):
        AppInfo.from_dict({"clases": ["a"]})
    with pytest.raises(InputError, match="'layout' must be one of"):
        AppInfo.from_dict({"postprocess": {"layout": "yolov9"}})
    info = AppInfo.from_dict({"task": "detect", "classes": ["a"],
                              "preprocess": {"size": [8, 8]}, "postprocess": {"iou": 0.7}})
    assert AppInfo.from_dict(info.to_dict()) == info


def test_a_build_dir_carries_the_app_info_of_its_onnx(tmp_path, monkeypatch):
    """compile keeps metadata_props; a manifest "app" key, when present, wins."""
    hide_atc(monkeypatch)
    info = AppInfo.from_dict({"task": "segment", "classes": ["red"]})
    onnx.save(embed(red_mask_model(), info), tmp_path / "mask.onnx")
    compile_model(tmp_path / "mask.onnx", SOC, tmp_path / "build")
    with Segmenter.open(tmp_path / "build", backends="cpu") as segmenter:
        assert segmenter.class_names == ("background", "red")
    manifest = json.loads((tmp_path / "build" / "manifest.json").read_text())
    manifest["app"] = {"task": "detect"}
    (tmp_path / "build" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="its app info says task 'detect'"):
        Segmenter.open(tmp_path / "build", backends="cpu")
