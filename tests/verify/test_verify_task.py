"""verify --task: the candidate's decisions scored against the reference's, end to end."""

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.verify import verify

pytestmark = pytest.mark.ort


def _model(nodes, inputs, outputs, weights=()) -> onnx.ModelProto:
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [oh.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(weights).items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _offset_model(offset: np.ndarray) -> onnx.ModelProto:
    """y = x + offset: a 'detector' whose raw YOLOv5 head is its input, moved by ``offset``."""
    return _model([oh.make_node("Add", ["x", "d"], ["y"])], {"x": [1, 12, 7]},
                  {"y": [1, 12, 7]}, {"d": offset.astype(np.float32)})


def _heads() -> np.ndarray:
    x = np.zeros((1, 12, 7), np.float32)
    x[0, 0] = [50, 50, 20, 20, 0.9, 0.1, 0.9]  # class 1, score 0.81
    x[0, 1] = [150, 150, 20, 20, 0.9, 0.7, 0.3]  # class 0, score 0.63
    x[0, 2] = [150, 40, 20, 20, 0.9, 0.6, 0.4]  # class 0, score 0.54
    return x


def test_detect_parity_scores_moved_boxes_as_misses(tmp_path):
    inputs = tmp_path / "heads.npz"
    np.savez(inputs, x=_heads())
    reference = _offset_model(np.zeros((1, 12, 7)))
    same = verify(reference, reference, inputs=inputs, task="detect")
    assert same.task.metrics["AP50"] == 1.0 and same.passed
    moved = np.zeros((1, 12, 7))
    moved[0, 2, 0] = 14.0  # the 0.54 box moves 14 px: IoU 6/34 with where it was
    result = verify(reference, _offset_model(moved), inputs=inputs, task="detect",
                    min_cosine=0.9)
    # class 1: AP 1; class 0: the 0.63 box found, the 0.54 one is a false positive and its
    # ground truth a miss -> precision 1 up to recall 1/2 -> 51/101
    assert result.task.metrics["AP50"] == pytest.approx((1 + 51 / 101) / 2)
    assert result.task.metrics["ground_truth_boxes"] == 3
    assert not result.task.passed and not result.passed


def test_detect_parity_without_reference_boxes_fails_and_says_so(tmp_path):
    inputs = tmp_path / "heads.npz"
    np.savez(inputs, x=_heads())
    reference = _offset_model(np.zeros((1, 12, 7)))
    result = verify(reference, reference, inputs=inputs, task="detect", gt_conf=0.95)
    assert result.task.score is None and not result.passed
    assert "no reference decisions" in result.task.render()


def _segmenter(weights: np.ndarray) -> onnx.ModelProto:
    return _model([oh.make_node("Conv", ["x", "w"], ["y"])], {"x": [1, 2, 6, 6]},
                  {"y": [1, 3, 6, 6]}, {"w": weights.astype(np.float32)})


def test_segment_parity_is_mean_iou_of_argmax_maps():
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((3, 2, 1, 1))
    perturbed = weights.copy()
    perturbed[2, 0] += 0.8
    inputs = {"x": rng.standard_normal((1, 2, 6, 6)).astype(np.float32)}
    result = verify(_segmenter(weights), _segmenter(perturbed), inputs=inputs, task="segment",
                    min_cosine=0.0)
    x = inputs["x"][0].reshape(2, -1)
    ref = np.argmax(weights[:, :, 0, 0] @ x, axis=0)
    cand = np.argmax(perturbed[:, :, 0, 0] @ x, axis=0)
    ious = [np.sum((ref == c) & (cand == c)) / np.sum((ref == c) | (cand == c))
            for c in range(3) if np.any((ref == c) | (cand == c))]
    assert result.task.metrics["mean_iou"] == pytest.approx(np.mean(ious))
    assert result.task.metrics["mean_iou"] < 1.0


def test_classify_gate_and_cli_exit_codes(tmp_path, capsys):
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((2, 10)).astype(np.float32)

    def classifier(w):
        return _model([oh.make_node("MatMul", ["x", "w"], ["y"])], {"x": [1, 2]}, {"y": [1, 10]},
                      {"w": w})

    ref_path, flipped_path = tmp_path / "ref.onnx", tmp_path / "flipped.onnx"
    onnx.save(classifier(weights), ref_path)
    onnx.save(classifier(-weights), flipped_path)
    assert main(["verify", str(ref_path), str(ref_path), "--task", "classify",
                 "--samples", "3"]) == 0
    assert "top1 1.0000" in capsys.readouterr().out
    assert main(["verify", str(ref_path), str(flipped_path), "--task", "classify",
                 "--min-cosine", "-1"]) == 1
    assert "top1 0.0000" in capsys.readouterr().out


def test_task_output_must_fit_the_task():
    model = _model([oh.make_node("Relu", ["x"], ["y"])], {"x": [1, 5]}, {"y": [1, 5]})
    with pytest.raises(InputError, match="segmentation parity needs"):
        verify(model, model, task="segment")
