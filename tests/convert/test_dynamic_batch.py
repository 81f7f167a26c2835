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

from edgefuse.acl.build.compile import compile_model
from edgefuse.convert import convert
from tests.convert.graphs import dynamo_view, ort_run, with_symbolic_batch

pytestmark = pytest.mark.ort


def _images(batch: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)}


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
