"""A YOLOX built from YOLOX's own exp and exported as its export_onnx.py does, opened with no
config: the family is told from the raw head, the input is YOLOX's ``preproc`` to the pixel
(truncated content size, top-left pad 114, BGR 0-255), and the detections are its ONNXRuntime
demo's (``demo_postprocess``, ``multiclass_nms``), photo for photo.

The model: ``make_yolox.py`` (YOLOX-Nano's exp at width 1/16, 3 classes, seeded weights).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import onnxruntime as ort
import pytest

from edgefuse.goldens import frame_samples
from edgefuse.runtime import open_session
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.model.adapter import prepare_frame
from tests.vision.detect.exporters import yolox_reference as yolox
from tests.vision.detect.exporters.compare import HERE, PHOTOS, assert_same, photo, rows_of

pytestmark = pytest.mark.ort

MODEL = HERE / "yolox_nano_tiny.onnx"
SIZE = (416, 416)
CONF, IOU = 0.4, 0.45


@pytest.fixture(scope="module")
def detector():
    with Detector.open(MODEL, backends="cpu", conf=CONF, iou=IOU) as opened:
        yield opened


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])


def test_zero_config_takes_yolox_preprocessing_and_the_start_line_says_why(detector):
    assert detector.layout == "yolox"
    record = detector.plan.preprocess
    assert (record.resize, record.center, record.pad_value, record.color, record.scale,
            record.rounding, record.interpolation) == (
        "letterbox", False, 114, "BGR", 1.0, "floor", "linear")
    assert detector.preprocess_note == "preprocess: YOLOX's, told by its raw YOLOX head"


@pytest.mark.parametrize("path", PHOTOS, ids=lambda p: p.stem)
def test_the_input_is_yolox_preproc_to_the_pixel(detector, path):
    image = photo(path)
    feeds, geometry = detector.preprocess(image)
    theirs, ratio = yolox.preproc(image, SIZE)
    np.testing.assert_array_equal(feeds["images"][0], theirs)
    assert geometry.scale == ratio


@pytest.mark.parametrize("path", PHOTOS, ids=lambda p: p.stem)
def test_the_detections_are_the_yolox_onnxruntime_demo(detector, session, path):
    image = photo(path)
    dets, _, _ = yolox.predict(session, image, SIZE, score_thr=CONF, nms_thr=IOU)
    theirs = np.zeros((0, 6)) if dets is None else dets
    assert_same(rows_of(detector(image)), theirs, image)


def test_rounding_the_content_size_would_change_the_input(detector):
    """The check above has teeth: Ultralytics-style rounding gives other pixels on the photos
    whose ``w * r`` has a fraction of one half or more."""
    rounded = dataclasses.replace(
        detector.plan, preprocess=dataclasses.replace(detector.plan.preprocess,
                                                      rounding="round"))
    differ = [p.stem for p in PHOTOS if not np.array_equal(
        prepare_frame(rounded, photo(p))[0]["images"][0], yolox.preproc(photo(p), SIZE)[0])]
    assert differ, "no photo tells rounding from truncation"


def test_the_vendored_reference_is_the_yolox_package():
    """Where the ``yolox`` package is installed, its functions are the ones copied here."""
    package = pytest.importorskip("yolox.utils.demo_utils", reason="yolox is not installed")
    augment = sys.modules.get("yolox.data.data_augment") or pytest.importorskip(
        "yolox.data.data_augment")
    image = photo(PHOTOS[1])
    np.testing.assert_array_equal(augment.preproc(image, SIZE)[0], yolox.preproc(image, SIZE)[0])
    grid = np.random.default_rng(0).normal(size=(1, 3549, 8)).astype(np.float32)
    np.testing.assert_array_equal(package.demo_postprocess(grid.copy(), SIZE),
                                  yolox.demo_postprocess(grid.copy(), SIZE))


def test_frames_recorded_for_the_model_are_prepared_as_the_app_prepares_them(tmp_path):
    """goldens / calibration frames take the family's preprocessing too."""
    with open_session(MODEL, "cpu") as opened:
        samples = frame_samples(opened, MODEL, str(PHOTOS[2]))
    np.testing.assert_array_equal(samples[0]["images"][0], yolox.preproc(photo(PHOTOS[2]),
                                                                         SIZE)[0])
