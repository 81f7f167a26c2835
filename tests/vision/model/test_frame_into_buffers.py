"""A frame written once (issue 30 §3): ``prepare_frame(..., into=)`` writes the very bytes the
plain path makes (its own arrays are the reference), straight into the arrays it is given; the
sessions' ``input_buffers`` run as plain feeds do; ``VisionModel`` feeds frames through a pool of
them, and a set comes back when its frame's feeds are dropped."""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest

from edgefuse.acl.compile.aipp import _RGB_TO_YUV, AippSpec
from edgefuse.errors import InputError
from edgefuse.fallback.ort_session import OrtSession
from edgefuse.preprocess import Preprocess
from edgefuse.session import InputBuffers
from edgefuse.vision.model.adapter import InputPlan, prepare_frame
from edgefuse.vision.model.feed_pool import FeedPool
from edgefuse.vision.segment.segmenter import Segmenter
from tests.model_builders import conv_net
from tests.needs import optional
from tests.vision.model.test_model import aipp_build, two_reds
from tests.vision.models import red_mask_model

pytestmark = pytest.mark.ort

optional("cv2")

FRAMES = [(48, 64), (64, 48), (32, 32), (37, 91), (7, 5)]  # down, up, same, odd, tiny


def _frame(height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(height * 1000 + width)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def _tensor_plans():
    for resize, center, rounding, interpolation in [
            ("letterbox", True, "round", "linear"), ("letterbox", False, "floor", "cubic"),
            ("stretch", False, "round", "area")]:
        for color, layout, dtype in itertools.product(("RGB", "BGR"), ("NCHW", "NHWC"),
                                                      ("float32", "float16", "uint8")):
            scale = 1.0 if dtype == "uint8" else 1 / 255
            mean = (0.0, 0.0, 0.0) if dtype == "uint8" else (0.485, 0.456, 0.406)
            std = (1.0, 1.0, 1.0) if dtype == "uint8" else (0.229, 0.224, 0.225)
            yield InputPlan("x", Preprocess(size=(24, 40), resize=resize, center=center,
                                            rounding=rounding, interpolation=interpolation,
                                            color=color, layout=layout, dtype=dtype,
                                            scale=scale, mean=mean, std=std, pad_value=114))


def _aipp_plans():
    def plan(color, size=(24, 40), canvas=None, yuv=None):
        record = Preprocess(size=size, color=color, scale=1.0, layout="NHWC", dtype="uint8")
        return InputPlan("x", record, aipp=True, canvas=canvas, yuv=yuv)

    yield plan("BGR")
    yield plan("RGB")
    yield plan("RGB", canvas=(30, 44, 4, 2))
    for fmt in ("YUV420SP", "YVU420SP"):
        yield plan("BGR", yuv=AippSpec(input_format=fmt, source_size=(40, 24)))
        yield plan("BGR", canvas=(28, 44, 2, 4),
                   yuv=AippSpec(input_format=fmt, source_size=(44, 28), crop=(2, 4, 40, 24)))


@pytest.mark.parametrize("plan", [*_tensor_plans(), *_aipp_plans()],
                         ids=lambda p: f"{p.preprocess.resize}-{p.preprocess.color}-"
                                       f"{p.preprocess.layout}-{p.preprocess.dtype}-"
                                       f"{'yuv' if p.yuv else ''}{'canvas' if p.canvas else ''}")
def test_into_writes_the_bytes_the_plain_path_makes(plan):
    for size in FRAMES:
        image = _frame(*size)
        expected, geometry = prepare_frame(plan, image)
        reference = expected[plan.name]
        target = {plan.name: np.full(reference.shape, 77, reference.dtype)}  # stale contents
        written = target[plan.name]
        feeds, into_geometry = prepare_frame(plan, image, into=target)
        assert feeds is target and feeds[plan.name] is written  # written in place
        assert into_geometry == geometry
        np.testing.assert_array_equal(written, reference, err_msg=f"frame {size}")


def test_into_writes_extra_inputs_too():
    plan = InputPlan("image", Preprocess(size=(16, 16)), extras=("scale_factor", "im_shape"))
    image = _frame(32, 48)
    expected, _ = prepare_frame(plan, image)
    target = {name: np.zeros_like(array) for name, array in expected.items()}
    prepare_frame(plan, image, into=target)
    for name, array in expected.items():
        np.testing.assert_array_equal(target[name], array)


def test_onnxruntime_runs_its_input_buffers_in_place():
    session = OrtSession(conv_net(), "cpu")
    buffers = session.input_buffers()
    assert buffers.owned_by(session) and buffers.device_addresses is None
    # The OrtValue the run reads is the array the frame was written into.
    assert buffers.handle["x"].data_ptr() == buffers["x"].ctypes.data
    rng = np.random.default_rng(0)
    for _ in range(2):
        buffers["x"][...] = rng.standard_normal((1, 3, 8, 8))
        np.testing.assert_array_equal(session.run(buffers)["logits"],
                                      session.run({"x": np.array(buffers["x"])})["logits"])
    session.close()


def test_input_buffers_refuse_unknown_inputs_and_dynamic_sizes():
    session = OrtSession(conv_net(batch="N"), "cpu")
    with pytest.raises(InputError, match="unknown input"):
        session.input_buffers({"nope": (1,)})
    with pytest.raises(InputError, match="its size is only known per run"):
        session.input_buffers()
    assert session.input_buffers({"x": (2, 3, 8, 8)})["x"].shape == (2, 3, 8, 8)
    session.close()


def test_a_pool_lends_a_set_again_only_when_nothing_refers_to_it():
    session = OrtSession(conv_net(), "cpu")
    pool = FeedPool(session, limit=2)
    first, second = pool.take(), pool.take()
    assert isinstance(first, InputBuffers) and pool.take() is None  # both lent: plain path
    address = first["x"].ctypes.data
    assert second["x"].ctypes.data != address and pool.in_use == 2
    kept = first["x"][0]  # a caller keeps a view of the frame's input
    del first
    assert pool.take() is None and pool.in_use == 2  # not overwritten under the caller
    del kept
    gc.collect()  # CPython frees at once; collect only in case of a cycle
    again = pool.take()
    assert again is not None and again["x"].ctypes.data == address and pool.made == 2
    session.run(again)  # a run holds no reference after it returns
    del again, second
    assert pool.in_use == 0
    session.close()


def test_a_pool_over_a_session_without_fixed_shapes_feeds_plain_arrays():
    session = OrtSession(conv_net(batch="N"), "cpu")
    pool = FeedPool(session)
    assert pool.take() is None and "only known per run" in pool.off_reason
    session.close()


@pytest.mark.parametrize("input_format", ["BGR888", "YUV420SP"])
def test_a_vision_model_writes_frames_into_the_sessions_buffers(tmp_path, monkeypatch,
                                                               input_format):
    spec = AippSpec(input_format=input_format, source_size=(32, 32), scale=(1 / 255,) * 3)
    build = aipp_build(tmp_path, monkeypatch, spec)
    frame = two_reds(48, 64)
    with Segmenter.open(build, backends="sim") as segmenter:
        feeds, geometry = segmenter.preprocess(frame)
        assert isinstance(feeds, InputBuffers) and feeds.owned_by(segmenter.session)
        plain, _ = prepare_frame(segmenter.plan, frame)
        np.testing.assert_array_equal(feeds["images"], plain["images"])
        pooled = segmenter.postprocess(segmenter.infer(feeds), geometry)
        del feeds
        copied = segmenter.postprocess(segmenter.infer(plain), geometry)
        assert segmenter.feed_pool.made == 1
    np.testing.assert_array_equal(pooled.class_map, copied.class_map)
    assert (pooled.class_map[:, :32] == 0).all() and (pooled.class_map[:, 32:] == 1).all()


def test_segmenter_on_onnx_runs_the_same_through_its_buffers():
    frame = two_reds()
    with Segmenter.open(red_mask_model(), backends="cpu") as segmenter:
        results = [segmenter(frame) for _ in range(3)]  # sets reused frame after frame
        assert segmenter.feed_pool.made == 1
    for result in results:
        assert (result.class_map[:, :16] == 0).all() and (result.class_map[:, 16:] == 1).all()


@pytest.mark.parametrize("input_format", ["YUV420SP", "YVU420SP"])
@pytest.mark.parametrize("csc", ["bt601_narrow", "jpeg"])
def test_the_yuv_frame_is_the_bytes_it_was_before_it_could_be_written_in_place(input_format,
                                                                               csc):
    """The reference: frame_from_bgr as it was (uint8 planes cast apart, then concatenated)."""
    spec = AippSpec(input_format=input_format, source_size=(40, 24), csc=csc)
    image = _frame(24, 40)
    rgb = image[..., ::-1].astype(np.float64)
    forward, offset = _RGB_TO_YUV[csc]
    yuv = rgb @ np.asarray(forward).T + np.asarray(offset)
    luma = np.clip(np.rint(yuv[..., 0]), 0, 255).astype(np.uint8)
    chroma = yuv[..., 1:].reshape(12, 2, 20, 2, 2).mean(axis=(1, 3))
    chroma = chroma[..., ::-1] if input_format == "YVU420SP" else chroma
    chroma = np.clip(np.rint(chroma), 0, 255).astype(np.uint8).reshape(12, 40)
    expected = np.concatenate([luma, chroma])
    np.testing.assert_array_equal(spec.frame_from_bgr(image), expected)
    out = np.zeros_like(expected)
    assert spec.frame_from_bgr(image, out=out) is out
    np.testing.assert_array_equal(out, expected)


def test_a_device_input_in_the_sessions_buffers_is_fed_as_they_are(tmp_path, monkeypatch):
    """The board's DVPP source: VPC writes the model input into a set of the session's buffers
    (here the CPU writes the same NV12 bytes), the frame carries that set, and it is the feeds."""
    spec = AippSpec(input_format="YUV420SP", source_size=(32, 32), scale=(1 / 255,) * 3)
    build = aipp_build(tmp_path, monkeypatch, spec)
    frame = two_reds(48, 64)
    with Segmenter.open(build, backends="sim") as segmenter:
        pool = FeedPool(segmenter.session, make=segmenter.session.input_buffers, limit=1)
        plain, geometry = prepare_frame(segmenter.plan, frame)
        buffers = pool.take()
        np.copyto(buffers["images"], plain["images"])  # what VPC does on the board
        feeds, same = segmenter.preprocess_device(buffers, geometry)
        assert feeds is buffers and same is geometry
        from_buffers = segmenter.postprocess(segmenter.infer(feeds), geometry)
        from_bytes = segmenter.postprocess(segmenter.infer(
            segmenter.preprocess_device(plain["images"][0], geometry)[0]), geometry)
        assert pool.made == 1
    np.testing.assert_array_equal(from_buffers.class_map, from_bytes.class_map)
    assert (from_buffers.class_map[:, :32] == 0).all()
    assert (from_buffers.class_map[:, 32:] == 1).all()
