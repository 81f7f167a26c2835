"""Semantic outputs of real exported graphs: smaller than the input, NCHW and NHWC, a one-channel
map that ends in Sigmoid or in a convolution, against an independent reference (PyTorch's
``F.interpolate(bilinear, align_corners=False)`` to the input, the letterbox cut, the decision,
nearest to the frame); and the shape checks made before the first frame."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from edgefuse.errors import InputError
from edgefuse.model_info import AppInfo, Postprocess
from edgefuse.vision.segment.activation import output_activation
from edgefuse.vision.segment.segmenter import Segmenter
from tests.needs import optional
from tests.vision.segment.heads import SalientLike, SemanticLike, export

pytestmark = pytest.mark.torch

torch = optional("torch")
cv2 = optional("cv2")
F = torch.nn.functional

FRAME = (48, 96)  # in a 64 x 64 input: content rows 16..47, exact pads (see test_instances)
TOP = 16


@pytest.fixture(scope="module")
def frame():
    """Blocks of random colours, softened: regions for the random heads to tell apart."""
    rng = np.random.default_rng(5)
    blocks = rng.integers(0, 256, (FRAME[0] // 12, FRAME[1] // 12, 3), dtype=np.uint8)
    image = cv2.resize(blocks, FRAME[::-1], interpolation=cv2.INTER_NEAREST)
    return np.ascontiguousarray(cv2.GaussianBlur(image, (5, 5), 0))


def _to_frame(decision: np.ndarray) -> np.ndarray:
    """An input-size decision -> the frame: cut the padding, nearest resize."""
    return cv2.resize(decision[TOP:64 - TOP].astype(np.uint8), FRAME[::-1],
                      interpolation=cv2.INTER_NEAREST)


def _upsampled(scores_nchw: np.ndarray) -> np.ndarray:
    return F.interpolate(torch.from_numpy(scores_nchw), (64, 64), mode="bilinear",
                         align_corners=False)[0].numpy()


def _run(path, frame, **options):
    with Segmenter.open(path, backends="cpu", **options) as segmenter:
        feeds, geometry = segmenter.preprocess(frame)
        outputs = segmenter.infer(feeds)
        return segmenter, next(iter(outputs.values())), segmenter.postprocess(outputs, geometry)


def test_a_sigmoid_map_is_thresholded_as_probabilities(tmp_path, frame):
    path = tmp_path / "salient.onnx"
    model = export(SalientLike(), path, seed=1, scale=3.0, bias=0.05)
    assert model.graph.node[-1].op_type == "Sigmoid"
    segmenter, output, result = _run(path, frame, class_names=["object"])
    assert (segmenter.layout, segmenter.activation) == ("seg_sigmoid", "sigmoid")
    assert output.shape == (1, 1, 16, 16) and output.min() > 0  # every logit reading is > 0
    expected = _to_frame(_upsampled(output)[0] > 0.5)
    assert 0.05 < expected.mean() < 0.95
    np.testing.assert_array_equal(result.class_map, expected)
    record = segmenter.describe(result)
    assert record["foreground_pixels"] == int(expected.sum()) == record["pixels"]["object"]


def test_a_map_of_logits_is_thresholded_at_zero_and_the_key_overrides_the_graph(tmp_path, frame):
    path = tmp_path / "salient.onnx"
    export(SalientLike(), path, seed=1, scale=3.0, bias=0.05)
    _, output, as_probability = _run(path, frame)
    _, _, as_logit = _run(path, frame, activation="none")  # what the app did before
    assert as_logit.pixel_counts()[1] == FRAME[0] * FRAME[1]  # all foreground: the bug
    assert as_probability.pixel_counts()[1] < as_logit.pixel_counts()[1]
    logits = tmp_path / "logits.onnx"
    model = onnx.load(str(path))
    sigmoid = model.graph.node[-1]
    model.graph.node.remove(sigmoid)
    model.graph.node[-1].output[0] = sigmoid.output[0]
    onnx.save(model, str(logits))
    segmenter, raw, result = _run(logits, frame)
    assert segmenter.activation == "none"
    np.testing.assert_array_equal(result.class_map, _to_frame(_upsampled(raw)[0] > 0))
    # bilinear on logits or on probabilities: the same regions, borders within a pixel or two
    assert (result.class_map != as_probability.class_map).mean() < 0.03


@pytest.mark.parametrize("nhwc", [False, True])
def test_class_scores_at_an_eighth_are_upsampled_before_the_argmax(tmp_path, frame, nhwc):
    path = tmp_path / "semantic.onnx"
    export(SemanticLike(4, nhwc=nhwc), path, seed=2, scale=3.0, bias=0.05)
    segmenter, output, result = _run(path, frame)
    assert segmenter.layout == ("seg_logits_nhwc" if nhwc else "seg_logits")
    scores = output.transpose(0, 3, 1, 2) if nhwc else output
    assert scores.shape == (1, 4, 8, 8)
    expected = _to_frame(_upsampled(np.ascontiguousarray(scores)).argmax(axis=0))
    assert len(np.unique(expected)) >= 3
    np.testing.assert_array_equal(result.class_map, expected)
    assert result.num_classes == 4


def test_the_activation_is_followed_back_through_resampling_ops():
    nodes = [onnx.helper.make_node("Sigmoid", ["x"], ["p"]),
             onnx.helper.make_node("Resize", ["p", "", "scales"], ["r"]),
             onnx.helper.make_node("Squeeze", ["r"], ["mask"])]
    graph = onnx.helper.make_graph(nodes, "g", [], [])
    model = onnx.helper.make_model(graph)
    assert output_activation(model, "mask") == (
        "sigmoid", "the graph makes 'mask' by Squeeze <- Resize <- Sigmoid")
    assert output_activation(model, "x")[0] is None
    assert output_activation(None, "mask")[0] is None


def test_a_class_count_that_disagrees_with_the_names_exits_before_any_frame(tmp_path):
    path = tmp_path / "semantic.onnx"
    export(SemanticLike(4), path)
    with pytest.raises(InputError, match=r"has 4 classes \(axis 1 of its output .*\), but "
                                         r"class_names lists 3: a, b, c") as caught:
        Segmenter.open(path, backends="cpu", class_names=["a", "b", "c"])
    assert "(a background class counts)" in caught.value.hint
    info = AppInfo("segment", ("a", "b"), None, Postprocess())
    with pytest.raises(InputError, match="the model's app info classes lists 2"):
        Segmenter.open(path, backends="cpu", info=info)


def test_a_mask_output_of_the_wrong_rank_names_the_layouts_to_set(tmp_path):
    path = tmp_path / "semantic.onnx"
    export(SemanticLike(4), path)
    info = AppInfo("segment", (), None, Postprocess(layout="seg_argmax"))
    with pytest.raises(InputError, match=r"float32\[1,4,8,8\] has no axis of one channel; "
                                         r"layout seg_argmax reads \[1, h, w\]"):
        Segmenter.open(path, backends="cpu", info=info)
    flat = tmp_path / "flat.onnx"
    model = onnx.load(str(path))
    shape = onnx.helper.make_node("Constant", [], ["shape"], value=onnx.numpy_helper.from_array(
        np.array([1, 4, 64], np.int64)))
    last = model.graph.node[-1]
    reshape = onnx.helper.make_node("Reshape", ["flat_in", "shape"], [last.output[0]])
    last.output[0] = "flat_in"
    model.graph.node.extend([shape, reshape])
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    for size in (1, 4, 64):
        model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = size
    onnx.save(model, str(flat))
    info = AppInfo("segment", (), None, Postprocess(layout="seg_logits"))
    with pytest.raises(InputError, match=r"output .*\[1,4,64\].* has rank 3; layout seg_logits "
                                         r"reads \[1, C, h, w\] class scores") as caught:
        Segmenter.open(flat, backends="cpu", info=info)
    assert "set layout: to the one that matches" in caught.value.hint
