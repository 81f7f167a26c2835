"""Letterbox geometry and its inverse against Ultralytics' conventions; the preprocess record."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.preprocess import Geometry, Preprocess, fit, letterbox, stretch, to_tensor
from tests.needs import optional

pytestmark = pytest.mark.unit

cv2 = optional("cv2")


def ultralytics_letterbox(image, new_shape, color=114, center=True):
    """ultralytics/data/augment.py LetterBox.__call__ (auto=False, scale_fill=False,
    scaleup=True), transcribed: the reference the golden tests hold edgefuse to."""
    shape = image.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    new_unpad = int(round(shape[1] * r)), int(round(shape[0] * r))
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]
    if center:
        dw /= 2
        dh /= 2
    if shape[::-1] != new_unpad:
        image = cv2.resize(image, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)) if center else 0, int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)) if center else 0, int(round(dw + 0.1))
    image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT,
                               value=(color, color, color))
    return image, r, left, top


def ultralytics_scale_boxes(img1_shape, boxes, img0_shape, ratio_pad=None):
    """ultralytics/utils/ops.py scale_boxes (padding=True) with clip_boxes, in numpy."""
    if ratio_pad is None:
        gain = min(img1_shape[0] / img0_shape[0], img1_shape[1] / img0_shape[1])
        pad_x = round((img1_shape[1] - img0_shape[1] * gain) / 2 - 0.1)
        pad_y = round((img1_shape[0] - img0_shape[0] * gain) / 2 - 0.1)
    else:
        gain, (pad_x, pad_y) = ratio_pad[0][0], ratio_pad[1]
    boxes = boxes.astype(np.float64).copy()
    boxes[:, [0, 2]] = ((boxes[:, [0, 2]] - pad_x) / gain).clip(0, img0_shape[1])
    boxes[:, [1, 3]] = ((boxes[:, [1, 3]] - pad_y) / gain).clip(0, img0_shape[0])
    return boxes


def test_centred_odd_padding_puts_the_extra_pixel_bottom():
    frame = np.full((50, 100, 3), 7, np.uint8)
    image, geometry = letterbox(frame, (65, 64))
    # r = min(65/50, 64/100) = 0.64 -> content 64 x 32, 33 rows of padding: 16 above, 17 below
    assert geometry == Geometry((50, 100), (65, 64), 0.64, 0.64, 0, 16, 114, True)
    assert image.shape == (65, 64, 3)
    assert (image[:16] == 114).all() and (image[48:] == 114).all()
    assert (image[16:48] == 7).all()
    assert geometry.content_size == (32, 64)


def test_top_left_puts_all_padding_right_and_bottom():
    frame = np.full((50, 100, 3), 7, np.uint8)
    image, geometry = letterbox(frame, (65, 64), pad_value=0, center=False)
    assert (geometry.pad_left, geometry.pad_top, geometry.pad_value) == (0, 0, 0)
    assert (image[:32] == 7).all() and (image[32:] == 0).all()
    tall, tall_geometry = letterbox(np.full((100, 50, 3), 7, np.uint8), (64, 64), center=False)
    assert (tall_geometry.pad_left, tall_geometry.pad_top) == (0, 0)
    assert (tall[:, :32] == 7).all() and (tall[:, 32:] == 114).all()


@pytest.mark.parametrize("center", [True, False])
def test_letterbox_matches_ultralytics_on_many_shapes(center):
    rng = np.random.default_rng(0)
    for _ in range(40):
        h, w = (int(v) for v in rng.integers(5, 200, 2))
        size = (int(rng.integers(16, 96)), int(rng.integers(16, 96)))
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        image, geometry = letterbox(frame, size, center=center)
        expected, r, left, top = ultralytics_letterbox(frame, size, center=center)
        assert np.array_equal(image, expected), (h, w, size)
        assert (geometry.scale, geometry.pad_left, geometry.pad_top) == (r, left, top)


def test_boxes_map_back_like_ultralytics_scale_boxes():
    rng = np.random.default_rng(1)
    for _ in range(40):
        h, w = (int(v) for v in rng.integers(20, 300, 2))
        _, geometry = letterbox(np.zeros((h, w, 3), np.uint8), (64, 64))
        xy = rng.uniform(-5, 70, (6, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(0, 20, (6, 2))], axis=1)
        ratio_pad = ((geometry.scale,), (geometry.pad_left, geometry.pad_top))
        expected = ultralytics_scale_boxes((64, 64), boxes, (h, w), ratio_pad)
        np.testing.assert_allclose(geometry.to_frame(boxes), expected, rtol=1e-5, atol=1e-3)


def test_the_recorded_pad_is_the_one_placed_not_a_recomputed_one():
    """A 22 x 300 frame in 64 x 64: the content is round(4.69) = 5 rows, so 59 rows of padding,
    29 above. Ultralytics' scale_boxes recomputes the pad from the unrounded 4.69 rows and gets
    30, one model pixel (4.7 frame pixels) off; the geometry keeps the 29 that was placed."""
    frame = np.zeros((22, 300, 3), np.uint8)
    image, geometry = letterbox(frame, (64, 64))
    assert geometry.pad_top == 29 and (image[28] == 114).all() and (image[29] == 0).all()
    box = np.array([[0.0, 31, 64, 33]])  # model rows 31..33 are frame rows 9.375..18.75
    recomputed = ultralytics_scale_boxes((64, 64), box, (22, 300))
    np.testing.assert_allclose(recomputed, [[0, 4.6875, 300, 14.0625]], atol=1e-3)
    np.testing.assert_allclose(geometry.to_frame(box), [[0, 9.375, 300, 18.75]], atol=1e-3)


def test_inverse_of_forward_is_identity_and_clips_to_the_frame():
    _, geometry = letterbox(np.zeros((50, 100, 3), np.uint8), (65, 64))
    boxes = np.array([[10, 5, 60, 45], [0, 0, 100, 50]], np.float32)
    np.testing.assert_allclose(geometry.to_frame(geometry.to_model(boxes)), boxes, atol=1e-4)
    # By hand: model (0, 16) is frame (0, 0); model (64, 48) is frame (100, 50).
    np.testing.assert_allclose(geometry.to_model(boxes[1:]), [[0, 16, 64, 48]], atol=1e-4)
    outside = geometry.to_frame(np.array([[-10, 0, 70, 65]], np.float32))
    np.testing.assert_allclose(outside, [[0, 0, 100, 50]])


def test_stretch_scales_each_axis():
    frame = np.zeros((50, 100, 3), np.uint8)
    image, geometry = stretch(frame, (64, 32))
    assert image.shape == (64, 32, 3)
    assert (geometry.scale_x, geometry.scale_y, geometry.pad_left, geometry.pad_top) == (
        0.32, 1.28, 0, 0)
    np.testing.assert_allclose(geometry.to_frame([[0, 0, 32, 64]]), [[0, 0, 100, 50]], atol=1e-4)
    assert geometry.to_dict()["scale"] == [0.32, 1.28]


def test_mask_to_frame_cuts_the_padding_then_resizes_nearest():
    _, geometry = letterbox(np.zeros((50, 100, 3), np.uint8), (65, 64))
    mask = np.full((65, 64), 9, np.uint8)  # padding marked 9: must not survive
    mask[16:48, :32], mask[16:48, 32:] = 1, 2
    back = geometry.mask_to_frame(mask)
    assert back.shape == (50, 100)
    assert (back[:, :50] == 1).all() and (back[:, 50:] == 2).all()


def test_geometry_record_is_the_contract():
    _, geometry = letterbox(np.zeros((50, 100, 3), np.uint8), (65, 64))
    assert geometry.to_dict() == {"resize": "letterbox", "scale": 0.64, "pad_left": 0,
                                  "pad_top": 16, "pad_value": 114, "center": True,
                                  "src_size": [50, 100], "dst_size": [65, 64]}


def test_to_tensor_normalises_in_the_models_channel_order():
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)  # BGR
    record = Preprocess(size=(4, 6), color="RGB", scale=1 / 255, mean=(0.485, 0.456, 0.406),
                        std=(0.229, 0.224, 0.225))
    tensor = to_tensor(image, record)
    rgb = image[..., ::-1].astype(np.float64) / 255
    expected = ((rgb - record.mean) / np.array(record.std)).transpose(2, 0, 1)[np.newaxis]
    assert tensor.shape == (1, 3, 4, 6) and tensor.dtype == np.float32
    np.testing.assert_allclose(tensor, expected, rtol=1e-5, atol=1e-6)
    nhwc = to_tensor(image, Preprocess(size=(4, 6), color="BGR", layout="NHWC"))
    np.testing.assert_allclose(nhwc[0], image / 255.0, rtol=1e-6)
    half = to_tensor(image, Preprocess(size=(4, 6), dtype="float16"))
    assert half.dtype == np.float16
    raw = to_tensor(image, Preprocess(size=(4, 6), layout="NHWC", dtype="uint8", scale=1.0))
    assert raw.dtype == np.uint8 and np.array_equal(raw[0], image[..., ::-1])


def test_preprocess_record_round_trips_and_merges_onto_a_base():
    base = Preprocess(size=(640, 640))
    record = Preprocess.from_dict({"pad_value": 0, "center": False}, base=base)
    assert (record.size, record.pad_value, record.center) == ((640, 640), 0, False)
    assert Preprocess.from_dict(record.to_dict()) == record
    image, geometry = fit(np.zeros((10, 20, 3), np.uint8), record)
    assert image.shape == (640, 640, 3) and geometry.pad_top == 0


@pytest.mark.parametrize(("data", "message"), [
    ({"size": [64, 64], "pad_valu": 0}, "(?s)unknown key 'pad_valu'.*did you mean 'pad_value'"),
    ({"size": [64, 64], "center": "yes"}, "'center' must be true or false"),
    ({"size": [64]}, "'size' must be a list of 2 numbers"),
    ({"size": [64, 64], "layout": "CHW"}, "'layout' must be one of"),
    ({"size": [64, 64], "dtype": "uint8"}, "uint8 model input takes the raw frame"),
    ({"pad_value": 0}, "needs 'size'"),
])
def test_bad_records_are_refused_with_the_key(data, message):
    with pytest.raises(InputError, match=message):
        Preprocess.from_dict(data, where="config.yaml preprocess")
