"""PaddleDetection exports (``make_paddle.py``: its own configs, ``Trainer.export``,
paddle2onnx) opened as a user would, compared photo by photo with PaddleDetection's own
pipeline (``paddle_reference.py``: ppdet's operators, the ONNX fed as ``infer.py`` feeds it,
ppdet's MultiClassNMS or ``picodet_postprocess.py``), whose detections are kept in
``paddle/reference.json``; where paddle and ppdet are installed the references are made again.

- with ``infer_cfg.yml`` beside the model: its preprocessing (cubic resize), class names and
  thresholds; PP-YOLOE+'s ``scale_factor`` input fed from the stretch;
- with nothing beside it: the family told by the inputs or the heads, said on the start line,
  and where the normalisation is a guess, said to be one.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from edgefuse.errors import InputError
from edgefuse.preprocess import Geometry
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.model.adapter import prepare_frame
from edgefuse.vision.model.extra_inputs import extra_feeds
from edgefuse.vision.model.paddle_record import read_infer_cfg
from tests.vision.detect.exporters.compare import HERE, PHOTOS, assert_same, photo, rows_of

pytestmark = pytest.mark.ort

MODELS = HERE / "paddle"
REFERENCE = json.loads((MODELS / "reference.json").read_text())
NAMES = list(REFERENCE)


def open_model(path, name: str, **options) -> Detector:
    ref = REFERENCE[name]
    return Detector.open(path, backends="cpu", conf=ref["conf"], iou=ref["iou"], max_det=300,
                         **options)


def theirs(name: str, path) -> np.ndarray:
    return np.array(REFERENCE[name]["photos"][path.name]).reshape(-1, 6)


def alone(tmp_path, name: str):
    """The model file without its infer_cfg.yml."""
    target = tmp_path / f"{name}.onnx"
    shutil.copy(MODELS / name / "model.onnx", target)
    return target


@pytest.mark.parametrize("name", NAMES)
def test_with_infer_cfg_the_detections_are_paddledetections(name):
    with open_model(MODELS / name / "model.onnx", name) as detector:
        assert detector.preprocess_note.startswith("preprocess: infer_cfg.yml beside the model")
        assert detector.class_names == ("person", "cat", "cup")
        assert detector.plan.preprocess.interpolation == "cubic"
        for path in PHOTOS:
            image = photo(path)
            assert_same(rows_of(detector(image)), theirs(name, path), image, least=0)
    assert sum(len(theirs(name, p)) for p in PHOTOS) > 100, "too few boxes to tell anything"


def test_ppyoloe_exclude_nms_takes_scale_factor_from_the_stretch():
    with open_model(MODELS / "ppyoloe_plus" / "model.onnx", "ppyoloe_plus") as detector:
        assert [s.name for s in detector.session.inputs] == ["image", "scale_factor"]
        for path in PHOTOS:
            image = photo(path)
            feeds, _ = detector.preprocess(image)
            height, width = image.shape[:2]  # Resize keep_ratio false: [640 / h, 640 / w]
            np.testing.assert_allclose(feeds["scale_factor"], [[640 / height, 640 / width]],
                                       rtol=1e-7)


def test_linear_instead_of_cubic_changes_the_detections():
    """The comparison has teeth: PaddleDetection's interp 2 matters."""
    name = "ppyoloe_plus"
    with open_model(MODELS / name / "model.onnx", name,
                    preprocess={"interpolation": "linear"}) as detector:
        differ = 0
        for path in PHOTOS:
            image = photo(path)
            try:
                assert_same(rows_of(detector(image)), theirs(name, path), image, least=0)
            except AssertionError:
                differ += 1
    assert differ >= 3


@pytest.mark.parametrize(("name", "family", "guess"), [
    ("ppyoloe_plus", "PaddleDetection's, told by its input scale_factor", True),
    ("picodet_raw", "PaddleDetection PicoDet's, told by its PicoDet heads", False),
])
def test_without_infer_cfg_the_family_decides_and_says_so(tmp_path, name, family, guess):
    with open_model(alone(tmp_path, name), name) as detector:
        note = detector.preprocess_note
        assert note.startswith(f"preprocess: {family}")
        assert ("a guess" in note) == guess
        assert "infer_cfg.yml" in note
        for path in PHOTOS:
            image = photo(path)
            assert_same(rows_of(detector(image)), theirs(name, path), image, least=0)


def test_a_boxes_and_scores_picodet_without_infer_cfg_is_a_guess_that_misses(tmp_path):
    """PicoDet boxes + scores look like PP-YOLOE's: the normalisation taken is PP-YOLOE+'s, the
    start line says it is a guess, and indeed the boxes differ from PicoDet's own."""
    name = "picodet_boxes"
    with open_model(alone(tmp_path, name), name) as detector:
        assert "mean/std are a guess" in detector.preprocess_note
        image = photo(PHOTOS[0])
        with pytest.raises(AssertionError):
            assert_same(rows_of(detector(image)), theirs(name, PHOTOS[0]), image)
    with open_model(alone(tmp_path, name), name, preprocess={
            "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}) as detector:
        assert detector.preprocess_note.endswith("; mean, std from the config")
        assert_same(rows_of(detector(image)), theirs(name, PHOTOS[0]), image)


def test_im_shape_is_the_resized_size_before_padding():
    geometry = Geometry((480, 640), (640, 640), 1.0, 1.0, 0, 80, resize="letterbox")
    feeds = extra_feeds(["im_shape", "scale_factor"], geometry)
    np.testing.assert_array_equal(feeds["im_shape"], [[480, 640]])
    np.testing.assert_array_equal(feeds["scale_factor"], [[1.0, 1.0]])
    assert feeds["im_shape"].dtype == np.float32


def test_boxes_the_graph_divided_map_back_through_a_letterbox(tmp_path):
    """scale_factor fed from a centred letterbox: the graph's boxes / scale still need the
    pad taken off; the same boxes as the model with scale 1."""
    name = "ppyoloe_plus"
    image = photo(PHOTOS[3])
    letterbox = {"resize": "letterbox", "pad_value": 114}
    with open_model(MODELS / name / "model.onnx", name, preprocess=letterbox) as detector:
        ours = detector(image)
        feeds, geometry = detector.preprocess(image)
        assert geometry.pad_top > 0
        outputs = detector.infer({**feeds, "scale_factor": np.ones((1, 2), np.float32)})
    with open_model(MODELS / name / "model.onnx", name, preprocess=letterbox) as plain:
        plain._in_graph_scale = False  # boxes in model pixels: the ordinary letterbox inverse
        expected = plain.postprocess(outputs, geometry)
    assert len(expected.boxes) > 0
    assert_same(rows_of(ours), rows_of(expected), image)


def test_an_unknown_extra_input_is_refused_by_name(tmp_path):
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])
    extra = helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [1, 2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 32, 32])
    graph = helper.make_graph([helper.make_node("Identity", ["image"], ["out"])], "g",
                              [image, extra], [out])
    path = tmp_path / "two_inputs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(InputError, match="'anchors' is none of the extra inputs edgefuse feeds"):
        Detector.open(path, backends="cpu")


@pytest.mark.parametrize(("change", "message"), [
    ({"type": "Resize", "target_size": [640, 640], "keep_ratio": True, "interp": 2},
     "keep_ratio: true"),
    ({"type": "LetterBoxResize", "target_size": [640, 640]},
     "step 'LetterBoxResize' is not one edgefuse follows"),
    ({"type": "Resize", "target_size": [640, 640], "keep_ratio": False, "interp": 7},
     "interp 7 is not an OpenCV flag"),
])
def test_an_infer_cfg_step_edgefuse_cannot_follow_is_refused(tmp_path, change, message):
    data = yaml.safe_load((MODELS / "ppyoloe_plus" / "infer_cfg.yml").read_text())
    data["Preprocess"][0] = change
    path = tmp_path / "infer_cfg.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=message):
        read_infer_cfg(path)


def test_the_references_are_paddledetections_own():
    """Where paddle and ppdet are installed: the stored references made again, and ppdet's
    own preprocessed tensor is the one edgefuse feeds."""
    pytest.importorskip("ppdet", reason="paddledet is not installed (make_paddle.py's venv)")
    pytest.importorskip("scipy", reason="picodet_postprocess.py needs scipy")
    from tests.vision.detect.exporters import paddle_reference as reference

    for name in NAMES:
        conf, iou = REFERENCE[name]["conf"], REFERENCE[name]["iou"]
        with open_model(MODELS / name / "model.onnx", name) as detector:
            for path in PHOTOS:
                image = photo(path)
                np.testing.assert_allclose(reference.predict(MODELS / name, path, conf, iou),
                                           theirs(name, path), atol=1e-3)
                sample = reference.preprocess(MODELS / name, path)
                feeds, _ = prepare_frame(detector.plan, image)
                np.testing.assert_allclose(feeds["image"][0], sample["image"], atol=1e-4)


def test_an_export_with_im_shape_gets_the_resized_size(tmp_path):
    """An export that keeps ``im_shape`` (as PaddleDetection's RCNN-style ones do) is fed it:
    the PP-YOLOE+ graph with that input added, same detections."""
    model = onnx.load(MODELS / "ppyoloe_plus" / "model.onnx")
    model.graph.input.append(helper.make_tensor_value_info("im_shape", TensorProto.FLOAT,
                                                           ["N", 2]))
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    shutil.copy(MODELS / "ppyoloe_plus" / "infer_cfg.yml", tmp_path / "infer_cfg.yml")
    image = photo(PHOTOS[4])
    with open_model(path, "ppyoloe_plus") as detector:
        assert detector.plan.extras == ("scale_factor", "im_shape")
        feeds, _ = detector.preprocess(image)
        np.testing.assert_array_equal(feeds["im_shape"], [[640, 640]])
        assert_same(rows_of(detector(image)), theirs("ppyoloe_plus", PHOTOS[4]), image)


def test_an_input_named_scale_factor_that_is_not_n_by_2_is_refused(tmp_path):
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])
    extra = helper.make_tensor_value_info("scale_factor", TensorProto.FLOAT, [1, 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 32, 32])
    graph = helper.make_graph([helper.make_node("Identity", ["image"], ["out"])], "g",
                              [image, extra], [out])
    path = tmp_path / "scale4.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(InputError, match="named like PaddleDetection's 'scale_factor' but is "
                                         "not a float"):
        Detector.open(path, backends="cpu")


def test_an_infer_cfg_without_permute_or_with_a_padding_padstride_is_refused(tmp_path):
    data = yaml.safe_load((MODELS / "ppyoloe_plus" / "infer_cfg.yml").read_text())
    path = tmp_path / "infer_cfg.yml"
    path.write_text(yaml.safe_dump({**data, "Preprocess": data["Preprocess"][:2]}))
    with pytest.raises(InputError, match="has no Permute"):
        read_infer_cfg(path)
    steps = [*data["Preprocess"], {"type": "PadStride", "stride": 96}]
    path.write_text(yaml.safe_dump({**data, "Preprocess": steps}))
    with pytest.raises(InputError, match="PadStride 96 pads"):
        read_infer_cfg(path)
