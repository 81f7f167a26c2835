"""AIPP: aipp.cfg golden text, and the numpy emulation against the CANN formulas written out here.

The references below are written from the CANN docs, not from edgefuse's code:
- normalization (atlasatc_16_0022): out = (in - mean_chn - min_chn) * var_reci_chn;
- CSC (atlasatc_16_0021): out_row_i = (sum_j matrix_ricj * (in_j - input_bias_j)) >> 8, rows in
  output-channel order; JPEG matrix 256,0,359 / 256,-88,-183 / 256,454,0, bias 0,128,128;
- YUV420SP NV12 layout: a full Y plane, then one interleaved U,V pair per 2x2 pixel block; NV21
  is V,U; order: swap -> crop -> CSC -> normalize (atlasatc_16_0025).
Saturating CSC results to 0..255 is edgefuse's assumption (8-bit data path), not a doc statement.
"""

import numpy as np
import pytest

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.errors import InputError
from tests.needs import optional

pytestmark = pytest.mark.unit

IMAGENET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])

GOLDEN_BGR_CROP = """\
# Static AIPP for edgefuse spec: BGR888 256x256 -> RGB, model input = (pixel - mean) * var_reci
aipp_op {
    aipp_mode : static
    related_input_rank : 0
    input_format : RGB888_U8
    src_image_size_w : 256
    src_image_size_h : 256
    crop : true
    load_start_pos_w : 16
    load_start_pos_h : 16
    crop_size_w : 224
    crop_size_h : 224
    csc_switch : false
    rbuv_swap_switch : true
    min_chn_0 : 123.675
    min_chn_1 : 116.28
    min_chn_2 : 103.53
    var_reci_chn_0 : 0.017124753831663668
    var_reci_chn_1 : 0.01750700280112045
    var_reci_chn_2 : 0.017429193899782137
}
"""

GOLDEN_NV12 = """\
# Static AIPP for edgefuse spec: YUV420SP 640x480 -> RGB, model input = (pixel - mean) * var_reci
aipp_op {
    aipp_mode : static
    related_input_rank : 1
    input_format : YUV420SP_U8
    src_image_size_w : 640
    src_image_size_h : 480
    csc_switch : true
    rbuv_swap_switch : false
    matrix_r0c0 : 256
    matrix_r0c1 : 0
    matrix_r0c2 : 359
    matrix_r1c0 : 256
    matrix_r1c1 : -88
    matrix_r1c2 : -183
    matrix_r2c0 : 256
    matrix_r2c1 : 454
    matrix_r2c2 : 0
    input_bias_0 : 0
    input_bias_1 : 128
    input_bias_2 : 128
    min_chn_0 : 0.0
    min_chn_1 : 0.0
    min_chn_2 : 0.0
    var_reci_chn_0 : 0.00392156862745098
    var_reci_chn_1 : 0.00392156862745098
    var_reci_chn_2 : 0.00392156862745098
}
"""

JPEG = np.array([[256, 0, 359], [256, -88, -183], [256, 454, 0]])
JPEG_BIAS = np.array([0, 128, 128])


def test_bgr_crop_imagenet_cfg_golden():
    spec = AippSpec.from_dict(
        dict(input_format="BGR888", source_size=[256, 256], crop=[16, 16, 224, 224], **IMAGENET)
    )
    assert spec.to_cfg() == GOLDEN_BGR_CROP


def test_nv12_scale_cfg_golden():
    spec = AippSpec.from_dict(
        dict(input_format="YUV420SP", source_size=[640, 480], scale=1 / 255)
    )
    assert spec.to_cfg(related_input_rank=1) == GOLDEN_NV12


def _normalize_reference(pixels_hwc, mean_chn, min_chn, var_reci_chn):
    """atlasatc_16_0022, per channel, then NCHW with a batch of one."""
    out = np.empty(pixels_hwc.shape, np.float64)
    for i in range(3):
        out[..., i] = (pixels_hwc[..., i] - mean_chn[i] - min_chn[i]) * var_reci_chn[i]
    return out.transpose(2, 0, 1)[None]


@pytest.mark.parametrize(("source", "model", "swap"), [
    ("BGR888", "RGB", True), ("RGB888", "RGB", False), ("RGB888", "BGR", True),
    ("BGR888", "BGR", False),
])
def test_rgb_family_emulation_matches_the_documented_formula(source, model, swap):
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    spec = AippSpec.from_dict(dict(input_format=source, source_size=[64, 48],
                                   crop=[8, 4, 32, 40], model_color=model, **IMAGENET))
    assert spec.rbuv_swap is swap
    swapped = frame[..., ::-1] if swap else frame  # rbuv_swap_switch: R<->B
    cropped = swapped[4:44, 8:40].astype(np.float64)  # load_start_pos_h/w, crop_size_h/w
    reference = _normalize_reference(cropped, [0, 0, 0], IMAGENET["mean"],
                                     [1 / s for s in IMAGENET["std"]])
    np.testing.assert_allclose(spec.emulate(frame), reference, rtol=1e-6, atol=1e-5)
    nhwc = spec.emulate(frame, layout="NHWC")
    np.testing.assert_array_equal(nhwc, spec.emulate(frame).transpose(0, 2, 3, 1))


def _nv12(y_plane, uv_pairs):
    """An NV12 buffer: Y rows, then rows of interleaved U,V (one pair per 2x2 block)."""
    y_plane = np.asarray(y_plane, np.uint8)
    height, width = y_plane.shape
    uv = np.asarray(uv_pairs, np.uint8).reshape(height // 2, width)
    return np.concatenate([y_plane, uv], axis=0)


def _csc_reference(y, u, v, matrix=JPEG, bias=JPEG_BIAS):
    """atlasatc_16_0021 for one pixel, with Python's integer floor shift, saturated."""
    vec = [y - bias[0], u - bias[1], v - bias[2]]
    return [min(255, max(0, sum(int(matrix[i][j]) * vec[j] for j in range(3)) >> 8))
            for i in range(3)]


def test_hand_built_nv12_pixels_convert_like_the_matrix_says():
    # 4x2 frame: two 2x2 blocks. Block 0: Y=81, U=90, V=240; block 1: Y=128, U=V=128 (grey).
    y_plane = [[81, 81, 128, 128], [81, 81, 128, 128]]
    frame = _nv12(y_plane, [90, 240, 128, 128])
    spec = AippSpec.from_dict(dict(input_format="YUV420SP", source_size=[4, 2]))
    out = spec.emulate(frame)
    # By hand: R = (256*81 + 359*112) >> 8 = 60944 >> 8 = 238;
    # G = (256*81 - 88*(-38) - 183*112) >> 8 = 3584 >> 8 = 14; B = (256*81 + 454*(-38)) >> 8 = 13.
    assert out[0, :, 0, 0].tolist() == [238.0, 14.0, 13.0]
    assert out[0, :, 1, 1].tolist() == [238.0, 14.0, 13.0]  # same 2x2 block, same chroma
    assert out[0, :, 0, 2].tolist() == [128.0, 128.0, 128.0]
    assert _csc_reference(81, 90, 240) == [238, 14, 13]


def test_random_nv12_nv21_and_bgr_models_match_the_reference():
    rng = np.random.default_rng(3)
    height, width = 6, 8
    y_plane = rng.integers(0, 256, (height, width))
    u = rng.integers(0, 256, (height // 2, width // 2))
    v = rng.integers(0, 256, (height // 2, width // 2))
    nv12 = _nv12(y_plane, np.stack([u, v], axis=-1).reshape(-1))
    nv21 = _nv12(y_plane, np.stack([v, u], axis=-1).reshape(-1))
    expected_rgb = np.zeros((height, width, 3))
    for r in range(height):
        for c in range(width):
            expected_rgb[r, c] = _csc_reference(y_plane[r, c], u[r // 2, c // 2], v[r // 2, c // 2])
    crop = [2, 2, 4, 4]
    mean, scale = [10.0, 20.0, 30.0], [0.5, 0.25, 0.125]
    for fmt, frame in (("YUV420SP", nv12), ("YVU420SP", nv21)):
        for model, order in (("RGB", [0, 1, 2]), ("BGR", [2, 1, 0])):
            spec = AippSpec.from_dict(dict(input_format=fmt, source_size=[width, height],
                                           crop=crop, model_color=model, mean=mean, scale=scale))
            cropped = expected_rgb[2:6, 2:6][..., order]
            reference = _normalize_reference(cropped, [0, 0, 0], mean, scale)
            np.testing.assert_allclose(spec.emulate(frame), reference, rtol=0, atol=1e-5)


def test_saturation_of_out_of_range_csc_results():
    # Y=0, U=128, V=0: R = (359 * -128) >> 8 = -180 -> 0; G = (-183 * -128) >> 8 = 91; B = 0.
    frame = _nv12([[0, 0], [0, 0]], [128, 0])
    spec = AippSpec.from_dict(dict(input_format="YUV420SP", source_size=[2, 2]))
    assert spec.emulate(frame)[0, :, 0, 0].tolist() == _csc_reference(0, 128, 0) == [0, 91, 0]


def test_bt601_narrow_preset_uses_its_matrix():
    narrow = np.array([[298, 0, 409], [298, -100, -208], [298, 516, 0]])
    frame = _nv12([[100, 100], [100, 100]], [150, 60])
    spec = AippSpec.from_dict(dict(input_format="YUV420SP", source_size=[2, 2], csc="bt601_narrow"))
    expected = _csc_reference(100, 150, 60, narrow, np.array([16, 128, 128]))
    assert spec.emulate(frame)[0, :, 0, 0].tolist() == expected


def test_fp16_rounding_matches_numpy_half():
    frame = np.full((2, 2, 3), 201, np.uint8)
    spec = AippSpec.from_dict(dict(input_format="RGB888", source_size=[2, 2], **IMAGENET))
    exact = spec.emulate(frame)
    rounded = spec.emulate(frame, fp16=True)
    np.testing.assert_array_equal(rounded, exact.astype(np.float16).astype(np.float32))
    assert not np.array_equal(rounded, exact)


@pytest.mark.parametrize(("data", "match"), [
    (dict(input_format="YUV420SP", source_size=[8, 8], crop=[1, 2, 4, 4]), "odd: crop x"),
    (dict(input_format="YUV420SP", source_size=[7, 8]), "odd: source width"),
    (dict(input_format="RGB888", source_size=[8, 8], crop=[4, 4, 8, 8]), "does not fit"),
    (dict(input_format="RGB888", source_size=[8, 8], std=1, scale=1), "not both"),
    (dict(input_format="RGB888", source_size=[8, 8], std=[1, 0, 1]), "must not contain 0"),
    (dict(input_format="NV12", source_size=[8, 8]), "unknown input_format"),
    (dict(input_format="RGB888", source_size=[8, 8], model_colour="RGB"), "unknown AIPP spec keys"),
    (dict(input_format="RGB888", source_size=[8, 8], mean=[1, 2]), "one number or three"),
    (dict(input_format="RGB888", source_size=[8]), "list of 2 integers"),
    (dict(input_format="RGB888", source_size=[8192, 8]), "outside 1..4096"),
    (dict(source_size=[8, 8]), "needs 'input_format'"),
    (dict(input_format="RGB888", source_size=[8, 8], csc="bt2020"), "unknown csc"),
])
def test_bad_specs_are_refused(data, match):
    with pytest.raises(InputError, match=match):
        AippSpec.from_dict(data)


@pytest.mark.parametrize(("data", "written"), [
    (dict(source_size=[8, 8]), "write `input_format: BGR888`"),
    (dict(input_format="YUV420SP"), "write `source_size: [WIDTH, HEIGHT]`"),
])
def test_a_missing_key_says_what_to_write(data, written):
    """The spec's format is nowhere else on a user's screen: the error shows the line to add."""
    with pytest.raises(InputError) as refused:
        AippSpec.from_dict(data)
    assert refused.value.hint is not None and refused.value.hint.startswith(written)


def test_frame_shape_is_checked():
    spec = AippSpec.from_dict(dict(input_format="RGB888", source_size=[8, 4]))
    with pytest.raises(InputError, match=r"expects uint8\[4, 8, 3\]"):
        spec.emulate(np.zeros((8, 4, 3), np.uint8))


def test_from_yaml(tmp_path):
    path = tmp_path / "camera.yaml"
    path.write_text("input_format: BGR888\nsource_size: [640, 480]\nscale: 0.00392156862745098\n")
    spec = AippSpec.from_yaml(path)
    assert spec.source_size == (640, 480) and spec.var_reci == (0.00392156862745098,) * 3


@pytest.mark.parametrize(("fmt", "csc"), [("YUV420SP", "jpeg"), ("YVU420SP", "bt601_narrow"),
                                          ("YUV420SP", "bt709_narrow"), ("RGB888", "jpeg"),
                                          ("BGR888", "jpeg")])
def test_frames_made_from_a_bgr_image_come_back_as_the_image(fmt, csc):
    """frame_from_bgr is the inverse of what AIPP undoes: flat 2x2 blocks survive the chroma
    subsampling, so the model input is the image's RGB within the 8-bit CSC rounding."""
    optional("cv2")
    spec = AippSpec.from_dict({"input_format": fmt, "source_size": [8, 6], "csc": csc,
                               "scale": 1.0})
    blocks = np.random.default_rng(3).integers(20, 236, (3, 4, 3), dtype=np.uint8)
    image = blocks.repeat(2, axis=0).repeat(2, axis=1)  # BGR, 6 x 8
    frame = spec.frame_from_bgr(image)
    assert frame.dtype == np.uint8 and frame.shape == spec.frame_shape()
    rgb = spec.emulate(frame, layout="NHWC")[0]
    np.testing.assert_allclose(rgb, image[..., ::-1].astype(np.float32), atol=3)
