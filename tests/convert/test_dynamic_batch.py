"""A dynamic-batch export converted at batch 1 still runs at any batch, so it compiles with batch
gears.

Why: users bring ``dynamic=True`` exports (Ultralytics, YOLOX) and give convert the deployment
shape (``--input x:1,3,640,640``). Fixing the batch before folding baked the 1 into every
Reshape the model computes from ``x.size(0)``; ``compile --dynamic-batch 1,2,4`` then failed with
``gear-shape-fails`` on a model that is batch-agnostic.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.compile import compile_model
from edgefuse.convert import convert
from tests.convert.graphs import dynamo_upsample, dynamo_view, ort_run, with_symbolic_batch

pytestmark = pytest.mark.ort


def _images(batch: int, shape: tuple[int, ...] = (3, 8, 8)) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)}


def _reshape_target(proto: onnx.ModelProto) -> list[int]:
    (view,) = [n for n in proto.graph.node if n.op_type == "Reshape"]
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    return constants[view.input[1]].tolist()


def test_converted_at_batch_1_the_reshape_still_follows_the_batch():
    source = dynamo_view()
    converted = convert(source, inputs={"x": (1, 3, 8, 8)})
    assert [n.op_type for n in converted.graph.node] == ["Conv", "Reshape"]
    assert _reshape_target(converted) == [0, 6, -1]  # 0: copy the batch, not a baked 1
    np.testing.assert_allclose(ort_run(converted, _images(1))[0], ort_run(source, _images(1))[0],
                               rtol=1e-6)
    for batch in (2, 3):
        np.testing.assert_allclose(ort_run(with_symbolic_batch(converted), _images(batch))[0],
                                   ort_run(source, _images(batch))[0], rtol=1e-6)


def test_a_dynamic_batch_export_converted_at_batch_1_compiles_with_batch_gears(tmp_path):
    converted = tmp_path / "model.onnx"
    convert(dynamo_view(), output=converted, inputs={"x": (1, 3, 8, 8)})
    build = compile_model(converted, "Ascend310B4", tmp_path / "build", dynamic_batch=[1, 2, 4])
    manifest = json.loads((build.output_dir / "manifest.json").read_text())
    assert manifest["gears"]["dynamic_batch"] == [1, 2, 4]
    assert manifest["gears"]["dims"] == {"x": [0]}


def test_an_upsample_to_computed_sizes_converted_at_batch_1_resizes_by_scales_any_batch():
    source = dynamo_upsample()
    converted = convert(source, inputs={"x": (1, 2, 4, 4)})
    (resize,) = converted.graph.node
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in converted.graph.initializer}
    assert list(resize.input[:2]) == ["x", ""] and len(resize.input) == 3
    assert constants[resize.input[2]].tolist() == [1, 1, 4, 4]  # 1: the batch is not fixed
    for batch in (1, 3):
        feeds = _images(batch, (2, 4, 4))
        np.testing.assert_allclose(ort_run(with_symbolic_batch(converted), feeds)[0],
                                   ort_run(source, feeds)[0], rtol=1e-6)


def test_an_upsample_whose_scale_is_not_exact_keeps_its_sizes():
    """3 -> 5: float32(5 / 3) * 3 falls short of 5, so scales would give a 4-pixel output; the
    sizes stay (and, fixed at batch 1, keep the model at batch 1)."""
    converted = convert(dynamo_upsample(side=3, size=5), inputs={"x": (1, 2, 3, 3)})
    (resize,) = converted.graph.node
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in converted.graph.initializer}
    assert constants[resize.input[3]].tolist() == [1, 2, 5, 5]
