"""The trained shapes models: catalogue entries, shipped files, application info, and that they
find the objects of held-out generated scenes (scored by the package's own metrics).

Held-out scenes are generated here from what ``shapes.json`` records (scene seed, first held-out
index), preprocessed by small re-implementations of the recorded preprocessing, so the test checks
the record as much as the weights.
"""

import hashlib
import json

import numpy as np
import pytest

import edgefuse
from edgefuse.errors import InputError, ModelLoadError
from edgefuse.metrics.detect import Detections, average_precision, decode_yolo
from edgefuse.metrics.segment import mean_iou
from edgefuse.models import CATALOGUE, _trained, get_entry, shapes
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.vision.scenes.shapes import CLASSES, SAMPLE_CLIP, SceneGenerator
from tests.needs import optional

pytestmark = pytest.mark.torch

CONTRACT_PREPROCESS_KEYS = {
    "size", "resize", "pad_value", "center", "color", "scale", "mean", "std", "layout", "dtype"
}


@pytest.fixture(scope="module")
def record():
    return json.loads(shapes.RECORD_FILE.read_text())


def _held_out(record, model: str, count: int, size=(240, 320)):
    seed = record["models"][model]["scene_seed"]
    start = record["generator"]["held_out_start"]
    generator = SceneGenerator(seed, size)
    return [generator.scene(start + i) for i in range(count)]


# --- catalogue, files, application info --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "task", "output"),
    [
        ("shapes_yolov8", "detect", (1, 4 + len(CLASSES), 32 * 32 + 16 * 16 + 8 * 8)),
        ("shapes_deeplabv3plus", "segment", (1, 1 + len(CLASSES), 256, 256)),
    ],
)
def test_trained_entries_in_the_catalogue(name, task, output):
    entry = CATALOGUE[name]
    assert entry.task == task
    assert entry.shapes("full") == ((1, 3, 256, 256), output)
    assert entry.weights == f"{name}.pt"
    assert shapes.NUM_CLASSES == len(CLASSES)


def test_shipped_files_fit_their_budgets(record):
    weights = [_trained.WEIGHTS_DIR / f"{name}.pt" for name in (shapes.DETECTOR, shapes.SEGMENTER)]
    assert sum(path.stat().st_size for path in weights) <= 10 * 2**20
    for path in weights:
        assert record["models"][path.stem]["bytes"] == path.stat().st_size
    assert record["clip"]["file"] == "vision/scenes/data/shapes_clip.mp4"
    assert SAMPLE_CLIP.is_file() and SAMPLE_CLIP.stat().st_size <= 3 * 2**20
    assert record["clip"]["sha256"] == hashlib.sha256(SAMPLE_CLIP.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["shapes_yolov8", "shapes_deeplabv3plus"])
def test_application_info_is_the_recorded_one_and_follows_the_contract(name, record):
    info = get_entry(name).app_info()
    assert info == record["models"][name]["app"]
    assert info == shapes.app_info(name, CLASSES)  # the code still describes the shipped weights
    assert set(info["preprocess"]) == CONTRACT_PREPROCESS_KEYS
    assert info["preprocess"]["size"] == [256, 256]
    json.dumps(info)  # travels as a JSON string in the ONNX metadata


def test_detector_and_segmenter_application_info():
    detector = get_entry("shapes_yolov8").app_info()
    assert detector["task"] == "detect" and detector["classes"] == list(CLASSES)
    assert detector["preprocess"]["resize"] == "letterbox" and detector["preprocess"]["center"]
    assert detector["postprocess"]["layout"] == "yolov8"
    segmenter = get_entry("shapes_deeplabv3plus").app_info()
    assert segmenter["task"] == "segment"
    assert segmenter["classes"] == ["background", *CLASSES]
    assert segmenter["postprocess"] == {"layout": "seg_logits", "background": 0}


def test_untrained_entries_have_no_application_info():
    with pytest.raises(InputError, match="'yolov8n' has no application info") as info:
        get_entry("yolov8n").app_info()
    assert "shapes_yolov8" in info.value.hint


# --- the trained weights -----------------------------------------------------------------------


def _letterbox(image, size=256):
    """Ultralytics' centred letterbox with 114 padding (contracts.md), RGB / 255, NCHW."""
    cv2 = optional("cv2")
    height, width = image.shape[:2]
    scale = min(size / height, size / width)
    new_w, new_h = round(width * scale), round(height * scale)
    left, top = round((size - new_w) / 2 - 0.1), round((size - new_h) / 2 - 0.1)
    canvas = np.full((size, size, 3), 114, dtype=np.uint8)
    canvas[top:top + new_h, left:left + new_w] = cv2.resize(image, (new_w, new_h))
    tensor = canvas[:, :, ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 255
    return tensor, scale, np.array([left, top, left, top])


@pytest.fixture(scope="module")
def torch():
    return optional("torch")


@pytest.fixture(scope="module")
def detector(torch):
    return edgefuse.models.shapes_yolov8()


def test_trained_detector_finds_the_objects_of_held_out_scenes(detector, torch, record):
    predictions, truths = [], []
    for scene in _held_out(record, "shapes_yolov8", 16):
        tensor, scale, offset = _letterbox(scene.image)
        with torch.no_grad():
            output = detector(torch.from_numpy(tensor)).numpy()
        found = decode_yolo(output, conf_threshold=0.001, iou_threshold=0.6)[0]
        predictions.append(Detections((found.boxes - offset) / scale, found.scores, found.classes))
        truths.append(Detections(scene.boxes, np.ones(len(scene.boxes)), scene.classes))
    result = average_precision(predictions, truths)
    assert result["ground_truth_boxes"] >= 40
    assert result["AP50"] >= 0.8, result


def test_trained_segmenter_labels_the_pixels_of_held_out_scenes(torch, record):
    cv2 = optional("cv2")
    model = edgefuse.models.shapes_deeplabv3plus()
    info = get_entry("shapes_deeplabv3plus").app_info()["preprocess"]
    mean, std = np.array(info["mean"]), np.array(info["std"])
    references, candidates = [], []
    for scene in _held_out(record, "shapes_deeplabv3plus", 6):
        rgb = cv2.resize(scene.image, (256, 256))[:, :, ::-1] / 255.0
        tensor = ((rgb - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)
        with torch.no_grad():
            logits = model(torch.from_numpy(tensor))
        logits = torch.nn.functional.interpolate(logits, size=scene.mask.shape, mode="bilinear")
        references.append(scene.mask)
        candidates.append(logits[0].argmax(0).numpy())
    result = mean_iou(np.stack(references), np.stack(candidates), 1 + len(CLASSES))
    assert result["mean_iou"] >= 0.8, result


def test_weights_ship_as_fp16_and_load_widened(torch):
    state = torch.load(_trained.WEIGHTS_DIR / "shapes_yolov8.pt", weights_only=True)
    floats = [value for value in state.values() if value.is_floating_point()]
    assert floats and all(value.dtype == torch.float16 for value in floats)
    model = get_entry("shapes_yolov8").build()
    assert not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_missing_weights_are_an_installation_error(monkeypatch, tmp_path, torch):
    monkeypatch.setattr(_trained, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ModelLoadError, match="shapes_deeplabv3plus.pt' are missing") as info:
        get_entry("shapes_deeplabv3plus").build()
    assert "python -m training.shapes --task segment" in info.value.hint


def test_trained_detector_converts_to_the_yolov8_layout(detector, torch):
    model = edgefuse.convert(detector, inputs={"input": (1, 3, 256, 256)}, exporter="torchscript")
    (output,) = model.graph.output
    dims = [d.dim_value for d in output.type.tensor_type.shape.dim]
    assert dims == [1, 4 + len(CLASSES), 1344]
    feed = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)
    (got,) = run_onnx(model, {"input": feed}).values()
    with torch.no_grad():
        expected = detector(torch.from_numpy(feed)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
