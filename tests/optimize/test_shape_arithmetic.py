"""fold-shape-arithmetic: the shape chains of dynamic-batch exports fold to constant shapes.

The graphs are what ``torch.onnx.export(..., dynamic_axes={"x": {0: "batch"}})`` writes (older
PyTorch, opsets 11-17; paddle2onnx writes the same chains). Node counts after optimize are the
ones onnxslim 0.1.98 reaches on the same graphs (measured with it; it is not a CI dependency).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from edgefuse.optimize import optimize
from edgefuse.verify import verify
from tests.convert.graphs import dynamo_view
from tests.optimize.graphs import make_model, node, op_types

pytestmark = pytest.mark.ort


def _unsqueeze(source: str, out: str, opset: int, name: str) -> list:
    if opset < 13:
        return [node("Unsqueeze", [source], [out], axes=[0], name=name)]
    return [node("Unsqueeze", [source, "axis0"], [out], name=name)]


def _batch_of(tensor: str, prefix: str, opset: int) -> list:
    """``tensor.size(0)`` as a one-element vector: Shape -> Gather(0) -> Unsqueeze."""
    return [node("Shape", [tensor], [f"{prefix}.shape"], name=f"{prefix}.Shape"),
            node("Gather", [f"{prefix}.shape", "zero"], [f"{prefix}.b"], name=f"{prefix}.Gather",
                 axis=0),
            *_unsqueeze(f"{prefix}.b", f"{prefix}.b1", opset, f"{prefix}.Unsqueeze")]


def _constants(opset: int, **extra) -> dict:
    constants = {"zero": np.array(0, np.int64), **extra}
    if opset >= 13:
        constants["axis0"] = np.array([0], np.int64)
    return constants


def flatten_model(opset: int):
    """``y = x.view(x.size(0), -1)`` on a [batch, 4, 3, 3] input."""
    nodes = [*_batch_of("x", "f", opset),
             node("Concat", ["f.b1", "minus_one"], ["f.shape2"], name="concat", axis=0),
             node("Reshape", ["x", "f.shape2"], ["y"], name="flatten")]
    constants = _constants(opset, minus_one=np.array([-1], np.int64))
    return make_model(nodes, {"x": ["batch", 4, 3, 3]}, {"y": ["batch", 36]}, constants,
                      opset=opset)


def yolo_head_model(opset: int):
    """``y.view(bs, 3, 7, ny, nx).permute(0, 1, 3, 4, 2).view(bs, -1, 7)`` of a Conv output."""
    rng = np.random.default_rng(0)
    nodes = [node("Conv", ["x", "w"], ["c"], name="conv"),
             *_batch_of("c", "h", opset),
             node("Shape", ["c"], ["c.shape"], name="shape_hw"),
             node("Gather", ["c.shape", "two"], ["ny"], name="gather_ny", axis=0),
             node("Gather", ["c.shape", "three"], ["nx"], name="gather_nx", axis=0),
             *_unsqueeze("ny", "ny1", opset, "unsqueeze_ny"),
             *_unsqueeze("nx", "nx1", opset, "unsqueeze_nx"),
             node("Concat", ["h.b1", "three_seven", "ny1", "nx1"], ["s5"], name="concat5", axis=0),
             node("Reshape", ["c", "s5"], ["r5"], name="view5"),
             node("Transpose", ["r5"], ["t"], name="permute", perm=[0, 1, 3, 4, 2]),
             node("Concat", ["h.b1", "minus_one", "seven"], ["s3"], name="concat3", axis=0),
             node("Reshape", ["t", "s3"], ["y"], name="view3")]
    constants = _constants(opset, w=rng.standard_normal((21, 3, 1, 1)).astype(np.float32),
                           two=np.array(2, np.int64), three=np.array(3, np.int64),
                           three_seven=np.array([3, 7], np.int64),
                           minus_one=np.array([-1], np.int64), seven=np.array([7], np.int64))
    return make_model(nodes, {"x": ["batch", 3, 8, 8]}, {"y": ["batch", 192, 7]}, constants,
                      opset=opset)


def _run(model, batch: int) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(batch).standard_normal(
        (batch, *session.get_inputs()[0].shape[1:])).astype(np.float32)
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize(("build", "expected"), [
    (flatten_model, {"Reshape": 1}),
    (yolo_head_model, {"Conv": 1, "Reshape": 2, "Transpose": 1}),
])
def test_dynamic_batch_shape_chains_fold_to_constant_shapes(build, expected, opset):
    model = build(opset)
    result = optimize(model)
    assert dict(op_types(result.model)) == expected  # onnxslim: the same nodes
    for batch in (1, 3):  # the folded shapes still follow the batch (Reshape's 0 copies it)
        np.testing.assert_array_equal(_run(result.model, batch), _run(model, batch))
    assert verify(model, result.model).passed


def test_a_shape_the_evaluator_cannot_prove_is_left_alone():
    """``x.view(x.size(0) * 2, -1)``: two entries would need -1, so nothing is folded."""
    nodes = [*_batch_of("x", "f", 13),
             node("Mul", ["f.b1", "two"], ["double"], name="double"),
             node("Concat", ["double", "minus_one"], ["shape"], name="concat", axis=0),
             node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    constants = _constants(13, two=np.array([2], np.int64), minus_one=np.array([-1], np.int64))
    model = make_model(nodes, {"x": ["batch", 4, 4]}, {"y": ["2*batch", 8]}, constants,
                       opset=13)
    result = optimize(model)
    assert op_types(result.model)["Shape"] == 1
    np.testing.assert_array_equal(_run(result.model, 2), _run(model, 2))


def test_the_dynamo_exporters_spelling_of_a_batch_view_folds():
    """``Reshape(Squeeze(Shape(x)[0:1]), [-1])`` for ``x.size(0)``, the view with allowzero=1."""
    model = dynamo_view()
    result = optimize(model)
    assert dict(op_types(result.model)) == {"Conv": 1, "Reshape": 1}
    for batch in (1, 3):
        np.testing.assert_allclose(_run(result.model, batch), _run(model, batch), rtol=1e-6)
