"""Calibration on real data: folders of images and videos through the preprocessing record, and
gates that say when the inputs make an output meaningless instead of passing or failing on it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, embed
from edgefuse.preprocess import Preprocess
from edgefuse.quantize import quantize
from edgefuse.reference.compare import degenerate_outputs
from edgefuse.reference.feeds import VIDEO_FRAMES, feed_set, input_specs
from edgefuse.verify import verify
from tests.needs import optional

pytestmark = pytest.mark.ort


def grey_detector() -> onnx.ModelProto:
    """A 'detector' of mid-grey: exp(-1000 * sum_c (x_c - 0.5)^2) per pixel. On N(0, 1) noise it
    is ~0 everywhere (like a text detector's map on noise); on images with grey it lights up."""
    constants = [numpy_helper.from_array(np.array(0.5, np.float32), "half"),
                 numpy_helper.from_array(np.array(-1000.0, np.float32), "sharp"),
                 numpy_helper.from_array(np.array([1], np.int64), "channels")]
    nodes = [oh.make_node("Sub", ["x", "half"], ["d"]), oh.make_node("Mul", ["d", "d"], ["d2"]),
             oh.make_node("ReduceSum", ["d2", "channels"], ["s"], keepdims=1),
             oh.make_node("Mul", ["s", "sharp"], ["e"]), oh.make_node("Exp", ["e"], ["y"])]
    graph = oh.make_graph(nodes, "grey", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 3, 16, 16])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 16, 16])],
                          constants)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _images(folder, count=4):
    cv2 = optional("cv2")
    folder.mkdir()
    for index in range(count):
        image = np.zeros((24, 32, 3), np.uint8)
        image[:, : 8 + 4 * index] = 128  # a grey band of growing width
        cv2.imwrite(str(folder / f"{index}.png"), image)
    return folder


def test_near_constant_and_near_zero_outputs_are_told_apart_from_real_ones():
    rng = np.random.default_rng(0)
    samples = [{"zero": 1e-5 * rng.random((4,)), "flat": 7 + 1e-6 * rng.random((4,)),
                "real": rng.random((4,))} for _ in range(3)]
    found = degenerate_outputs(samples)
    assert set(found) == {"zero", "flat"}
    assert found["zero"].startswith("|x| <= 1e-05") and "around 7" in found["flat"]


def test_a_gate_on_noise_alone_is_inconclusive_and_real_images_make_it_meaningful(tmp_path,
                                                                                   capsys):
    path = tmp_path / "grey.onnx"
    onnx.save(grey_detector(), path)
    on_noise = verify(path, path)
    assert on_noise.inconclusive and not on_noise.passed
    assert "y" in on_noise.degenerate
    assert main(["verify", str(path), str(path)]) == 1
    assert "INCONCLUSIVE: every output is nearly constant on seeded random inputs" in \
        capsys.readouterr().out
    folder = _images(tmp_path / "frames")
    on_images = verify(path, path, inputs=folder)
    assert on_images.passed and on_images.degenerate == {} and on_images.samples == 4
    assert main(["verify", str(path), str(path), "--inputs", str(folder)]) == 0


def test_images_go_through_the_models_own_preprocessing_record(tmp_path):
    record = Preprocess(size=(16, 16), resize="letterbox", pad_value=0, color="BGR")
    model = embed(grey_detector(), AppInfo(task="segment", preprocess=record))
    folder = _images(tmp_path / "frames", count=1)
    (feeds,) = feed_set(input_specs(model), folder, preprocess=record)
    frame = optional("cv2").imread(str(folder / "0.png"))
    np.testing.assert_array_equal(feeds["x"], record(frame)[0])
    assert feeds["x"][0, :, 0].max() == 0  # letterbox padding rows (32x24 into 16x16) are 0


def test_a_video_gives_frames_spread_over_it(tmp_path):
    cv2 = optional("cv2")
    video = tmp_path / "clip.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10, (32, 24))
    for index in range(40):
        writer.write(np.full((24, 32, 3), index * 5, np.uint8))
    writer.release()
    feeds = feed_set(input_specs(grey_detector()), video)
    assert len(feeds) == VIDEO_FRAMES
    means = [float(f["x"].mean()) for f in feeds]
    assert means == sorted(means) and means[-1] - means[0] > 0.5  # first to last frame


def test_quantize_calibrates_on_images_and_reports_what_it_measured(tmp_path):
    folder = _images(tmp_path / "frames")
    result = quantize(grey_detector(), inputs=folder)
    assert result.report.degenerate == {} and result.passed
    assert result.report.settings["calibration"]["samples"] == 4
    on_noise = quantize(grey_detector())
    assert "y" in on_noise.report.degenerate and not on_noise.passed
    assert "INCONCLUSIVE" in on_noise.report.render()


def test_images_for_a_model_that_takes_no_image_are_refused(tmp_path):
    folder = _images(tmp_path / "frames", count=1)
    flat = oh.make_model(oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"])], "flat",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])]),
        opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(InputError, match="is not an image batch with a fixed size"):
        feed_set(input_specs(flat), folder)
    (folder / "broken.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="OpenCV cannot decode the image .*broken.png"):
        feed_set(input_specs(grey_detector()), folder)


@pytest.mark.parametrize(("given", "hint"), [
    ("frames/*.jpg", "--inputs takes no glob pattern: give the folder that holds the images "
                     "('frames')"),
    ("frames/missing.npz", "give an .npz file, a folder of .npz files, or (a model with one "
                           "image input) a folder of images or a video"),
])
def test_missing_inputs_say_what_to_give(tmp_path, monkeypatch, given, hint):
    """A shell glob quoted (or in a script) reaches --inputs as it is: the error names the
    folder to give instead; any other missing path lists what --inputs takes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "frames").mkdir()
    specs = input_specs(grey_detector())
    with pytest.raises(InputError, match="no such inputs file") as refused:
        feed_set(specs, given)
    assert refused.value.hint == hint
