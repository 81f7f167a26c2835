"""Every detector layout on a real torch.onnx export of its family, against the project's decode.

Each test exports a head written as its project exports it (``family_heads``), lets the
Detector tell the layout from the outputs and the graph, runs it on a frame with the family's
preprocessing, and compares the detections with the project's own post-processing
(``reference_decodes``) run on the same model outputs, the model input made the project's way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from edgefuse.apps.models import catalogue_info
from edgefuse.errors import InputError
from edgefuse.models import CATALOGUE
from edgefuse.runtime import open_session
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.scenes.shapes import CLASSES, SceneGenerator
from tests.needs import optional
from tests.vision.detect import reference_decodes as ref

torch = optional("torch")
cv2 = optional("cv2")

from tests.vision.detect import family_heads as fh  # noqa: E402 - needs torch

pytestmark = pytest.mark.torch

YOLOX_PRE = {"size": [160, 160], "center": False, "color": "BGR", "scale": 1.0,
             "pad_value": 114}
STRETCH_01 = {"size": [160, 160], "resize": "stretch", "color": "RGB", "scale": 1 / 255}


def frame(height: int = 240, width: int = 320, seed: int = 0) -> np.ndarray:
    """A BGR frame with structure at several scales (blobs on a noisy gradient), deterministic."""
    rng = np.random.default_rng(seed)
    image = np.zeros((height, width, 3), np.uint8)
    image[:] = np.linspace(30, 200, width, dtype=np.uint8)[None, :, None]
    for _ in range(12):
        centre = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        cv2.circle(image, centre, int(rng.integers(5, 60)), colour, -1)
    noise = rng.integers(-12, 13, image.shape)  # no two cells alike: no score ties to order
    return np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def run_onnx(path, tensor: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": tensor.astype(np.float32)})


def rows_of(result) -> np.ndarray:
    return np.concatenate([result.boxes, result.scores[:, None],
                           result.classes[:, None].astype(np.float32)], 1)


def assert_same(ours: np.ndarray, theirs: np.ndarray, image: np.ndarray, *, least: int) -> None:
    """Same detections (edgefuse clips boxes to the frame, as Ultralytics' scale_boxes does)."""
    theirs = theirs.copy()
    theirs[:, [0, 2]] = theirs[:, [0, 2]].clip(0, image.shape[1])
    theirs[:, [1, 3]] = theirs[:, [1, 3]].clip(0, image.shape[0])
    assert len(theirs) >= least, "the random head gives too few detections to compare"
    order_ours = np.lexsort((ours[:, 5], -ours[:, 4]))
    order_theirs = np.lexsort((theirs[:, 5], -theirs[:, 4]))
    np.testing.assert_allclose(ours[order_ours], theirs[order_theirs], rtol=1e-4, atol=2e-3)


# ---- YOLOX ------------------------------------------------------------------------------------


def yolox_input(image: np.ndarray, size=(160, 160)) -> tuple[np.ndarray, float]:
    """YOLOX ``preproc``: top-left paste on 114, int() sizes, BGR 0-255, CHW float32."""
    padded = np.full((*size, 3), 114, np.uint8)
    r = min(size[0] / image.shape[0], size[1] / image.shape[1])
    resized = cv2.resize(image, (int(image.shape[1] * r), int(image.shape[0] * r)),
                         interpolation=cv2.INTER_LINEAR)
    padded[:resized.shape[0], :resized.shape[1]] = resized
    return padded.transpose(2, 0, 1)[None].astype(np.float32), r


@pytest.fixture(scope="module")
def yolox_raw(tmp_path_factory):
    path = tmp_path_factory.mktemp("yolox") / "yolox_raw.onnx"
    return fh.export(fh.YoloxHead(3, decode=False), path, (160, 160), ["output"], seed=1)


def test_a_raw_yolox_head_is_told_from_its_graph_and_decoded_as_yolox_demo(yolox_raw):
    image = frame()
    with Detector.open(yolox_raw, backends="cpu", preprocess=YOLOX_PRE, conf=0.45) as detector:
        assert detector.layout == "yolox"
        assert "told from the graph" in detector.layout_note
        assert "undecoded" in detector.layout_note
        assert detector.heads.strides == (8, 16, 32) and detector.heads.num_classes == 3
        ours = rows_of(detector(image))
    tensor, ratio = yolox_input(image)
    theirs = ref.yolox(run_onnx(yolox_raw, tensor)[0], (160, 160), ratio, 0.45, 0.45)
    assert_same(ours, theirs, image, least=3)


def test_a_yolox_exported_decoded_reads_as_yolov5(tmp_path, yolox_raw):
    """decode_in_inference=True: the same weights, grids and Exp in the graph -> yolov5."""
    path = fh.export(fh.YoloxHead(3, decode=True), tmp_path / "yolox_dec.onnx", (160, 160),
                     ["output"], seed=1)
    with Detector.open(path, backends="cpu", preprocess=YOLOX_PRE, conf=0.3) as detector:
        assert detector.layout == "yolov5"
        assert "Exp" in detector.layout_note
    tensor, _ = yolox_input(frame())
    raw, decoded = run_onnx(yolox_raw, tensor)[0], run_onnx(path, tensor)[0]
    cells = [(x, y, s) for s in (8, 16, 32) for y in range(160 // s) for x in range(160 // s)]
    grid = np.array(cells, np.float32)
    np.testing.assert_allclose(decoded[0, :, :2], (raw[0, :, :2] + grid[:, :2]) * grid[:, 2:],
                               rtol=1e-5, atol=1e-3)


def test_without_the_graph_raw_yolox_and_yolov5_are_refused_with_the_key_to_set(yolox_raw):
    with open_session(onnx.load(str(yolox_raw)), "cpu") as session:
        with pytest.raises(InputError, match=r"fit 'yolov5' .* and 'yolox' .*no graph") as caught:
            Detector(session, preprocess=YOLOX_PRE)
        assert "layout:" in caught.value.hint and "yolov5 or yolox" in caught.value.hint
        declared = Detector(session, preprocess=YOLOX_PRE, layout="yolox")
        assert declared.layout == "yolox" and "set by 'layout:'" in declared.layout_note


def test_yolox_strides_are_configurable(tmp_path):
    path = fh.export(fh.YoloxHead(2, decode=False, strides=(8, 16, 32, 64)),
                     tmp_path / "p6.onnx", (128, 128), ["output"], seed=2)
    pre = {**YOLOX_PRE, "size": [128, 128]}
    with pytest.raises(InputError, match=r"(?s)does not decode the boxes.*'strides:'"):
        Detector.open(path, backends="cpu", preprocess=pre)  # 340 rows: not 8/16/32's 336
    with Detector.open(path, backends="cpu", preprocess=pre, strides=[8, 16, 32, 64],
                       conf=0.45) as detector:
        assert detector.layout == "yolox" and detector.heads.strides == (8, 16, 32, 64)
        image = frame(256, 256)
        ours = rows_of(detector(image))
    tensor, ratio = yolox_input(image, (128, 128))
    theirs = ref.yolox(run_onnx(path, tensor)[0], (128, 128), ratio, 0.45, 0.45,
                       strides=(8, 16, 32, 64))
    assert_same(ours, theirs, image, least=2)


# ---- end2end ----------------------------------------------------------------------------------


def letterbox_input(image: np.ndarray, size=(160, 160)) -> tuple[np.ndarray, float, tuple]:
    """Ultralytics LetterBox (centred, 114), RGB /255."""
    h, w = image.shape[:2]
    r = min(size[0] / h, size[1] / w)
    new_w, new_h = int(round(w * r)), int(round(h * r))
    dw, dh = (size[1] - new_w) / 2, (size[0] - new_h) / 2
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    top, left = int(round(dh - 0.1)), int(round(dw - 0.1))
    out = cv2.copyMakeBorder(resized, top, int(round(dh + 0.1)), left, int(round(dw + 0.1)),
                             cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return out[..., ::-1].transpose(2, 0, 1)[None] / 255.0, r, (left, top)


def test_a_yolov10_end_to_end_export_is_told_by_its_topk_and_kept_without_nms(tmp_path):
    path = fh.export(fh.V10Head(4, max_det=100), tmp_path / "v10.onnx", (160, 160),
                     ["output0"], seed=3)
    image = frame()
    with Detector.open(path, backends="cpu", preprocess={"size": [160, 160]},
                       conf=0.74) as detector:
        assert detector.layout == "end2end" and detector.heads.form == "k6"
        assert "TopK" in detector.layout_note or "a TopK/gather" in detector.layout_note
        ours = rows_of(detector(image))
    tensor, r, (left, top) = letterbox_input(image)
    theirs = ref.ultralytics_end2end(run_onnx(path, tensor)[0], 0.74, 300)
    theirs[:, [0, 2]] = (theirs[:, [0, 2]] - left) / r
    theirs[:, [1, 3]] = (theirs[:, [1, 3]] - top) / r
    assert_same(ours, theirs, image, least=3)


@pytest.mark.parametrize("sigmoid", [False, True])
def test_detr_boxes_and_scores_take_a_sigmoid_only_where_the_graph_gives_logits(tmp_path,
                                                                                 sigmoid):
    # Neutral names: only the graph says whether the class output went through a Sigmoid.
    path = fh.export(fh.DetrHead(5, sigmoid=sigmoid), tmp_path / "detr.onnx", (160, 160),
                     ["out_a", "out_b"], seed=4)
    image = frame()
    with Detector.open(path, backends="cpu", preprocess=STRETCH_01, conf=0.52) as detector:
        assert detector.layout == "end2end" and detector.heads.form == "detr"
        assert detector.heads.logits is (not sigmoid)
        ours = rows_of(detector(image))
    tensor = cv2.resize(image, (160, 160), interpolation=cv2.INTER_LINEAR)
    tensor = tensor[..., ::-1].transpose(2, 0, 1)[None] / 255.0
    scores, boxes = run_onnx(path, tensor)
    theirs = ref.detr(scores, boxes, (320, 240), sigmoid=not sigmoid, top=300, threshold=0.52)
    assert_same(ours, theirs, image, least=3)


# ---- PaddleDetection --------------------------------------------------------------------------


# Linear, as paddle_input resizes (the family's default, told from the outputs, is cubic).
PADDLE_PRE = {"size": [160, 160], "resize": "stretch", "color": "RGB", "scale": 1 / 255,
              "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
              "interpolation": "linear"}


def paddle_input(image: np.ndarray, size=(160, 160)) -> tuple[np.ndarray, float, float]:
    """Resize (keep_ratio False), RGB, /255, ImageNet mean/std, CHW; scale factors y, x."""
    resized = cv2.resize(image, size[::-1], interpolation=cv2.INTER_LINEAR)[..., ::-1] / 255.0
    normalised = (resized - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    return normalised.transpose(2, 0, 1)[None], size[0] / image.shape[0], size[1] / image.shape[1]


def test_ppyoloe_boxes_and_scores_decode_with_paddle_multiclass_nms(tmp_path):
    path = fh.export(fh.PpyoloeHead(3, 16, (8, 16, 32)), tmp_path / "ppyoloe.onnx",
                     (160, 160), ["boxes", "scores"], seed=5)
    image = frame()
    with Detector.open(path, backends="cpu", preprocess=PADDLE_PRE, conf=0.9,
                       iou=0.6) as detector:
        assert detector.layout == "ppyoloe" and detector.heads.form == "boxes_scores"
        ours = rows_of(detector(image))
    tensor, scale_y, scale_x = paddle_input(image)
    boxes, scores = run_onnx(path, tensor)
    theirs = ref.paddle_multiclass_nms(boxes[0], scores[0], 0.9, 0.6, 1000, 300)
    theirs[:, [0, 2]] /= scale_x
    theirs[:, [1, 3]] /= scale_y
    assert_same(ours, theirs, image, least=3)


@pytest.mark.parametrize(("classes", "size"), [(3, (160, 160)), (8, (192, 128))])
def test_picodet_raw_heads_decode_as_picodet_postprocess(tmp_path, classes, size):
    """Eight outputs, reg_max 7 from the shape, strides from the rows (also of a portrait
    input); with 8 classes both outputs of a stride are multiples of 4, and the Sigmoid in the
    graph tells the class scores."""
    strides = (8, 16, 32, 64)
    names = [f"score_{s}" for s in strides] + [f"dist_{s}" for s in strides]
    path = fh.export(fh.PicoRawHead(classes, 7, strides), tmp_path / "pico.onnx", size,
                     names, seed=6)
    image = frame()
    with Detector.open(path, backends="cpu", preprocess={**PADDLE_PRE, "size": list(size)},
                       conf=0.95, iou=0.6) as detector:
        assert detector.layout == "ppyoloe" and detector.heads.form == "pico"
        assert detector.heads.strides == strides and detector.heads.reg_max == 7
        assert detector.heads.names == tuple(names)
        ours = rows_of(detector(image))
    tensor, scale_y, scale_x = paddle_input(image, size)
    outputs = run_onnx(path, tensor)
    theirs = ref.picodet(outputs[:4], outputs[4:], strides, size, 0.95, 0.6)
    theirs[:, [0, 2]] /= scale_x
    theirs[:, [1, 3]] /= scale_y
    assert_same(ours, theirs, image, least=3)


# ---- the repository's own detectors -----------------------------------------------------------


@pytest.mark.parametrize(("name", "layout"), [
    ("shapes_yolov8", "yolov8"), ("yolov5s:tiny", "yolov5"),
    pytest.param("yolov8n:tiny", "yolov8", marks=pytest.mark.slow),
    pytest.param("yolov3:tiny", "yolov5", marks=pytest.mark.slow),
])
def test_the_catalogue_detectors_are_told_without_their_layout_and_decode_the_same(tmp_path,
                                                                                   name, layout):
    """The trained shapes detector on a real scene; the others (seeded) on the same frame."""
    entry_name, _, variant = name.partition(":")
    entry = CATALOGUE[entry_name]
    info = catalogue_info(entry, variant or "full")
    bare = dataclasses.replace(info, postprocess=dataclasses.replace(info.postprocess,
                                                                     layout=None))
    path = tmp_path / "model.onnx"
    torch.onnx.export(entry.build(variant or "full").eval(),
                      (torch.zeros(entry.shapes(variant or "full")[0]),), str(path),
                      opset_version=17, dynamo=False, input_names=["images"])
    image = SceneGenerator(7, (240, 320)).scene(0).image
    with Detector.open(path, backends="cpu", info=bare) as told, \
            Detector.open(path, backends="cpu", info=info) as declared:
        assert told.layout == layout and "told from" in told.layout_note
        assert declared.layout == layout and "app info" in declared.layout_note
        ours, theirs = told(image), declared(image)
    np.testing.assert_array_equal(ours.boxes, theirs.boxes)
    if name == "shapes_yolov8":
        assert len(ours) >= 1 and set(ours.classes.tolist()) <= set(range(len(CLASSES)))
