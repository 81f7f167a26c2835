"""The spec's ``optimize.yolo_head``: the optimize stage gates the raw outputs, then appends the
device-side YOLO decode + NMS, and the app is told to read its rows (layout ``yolo_head``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.bundle.cache import Entry
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.stages import MODEL_FILE, _optimize, resolve_app_info
from edgefuse.reference.onnx_runner import run_onnx

pytestmark = pytest.mark.ort

SPEC = """\
apiVersion: edgefuse/v1
bundle: {name: heads, version: 1.0.0}
target: {soc: Ascend310B4}
models:
  - name: det
    source: raw.onnx
    optimize:
      target: soc
      yolo_head: {conf: 0.3, iou: 0.5, max_det: 20}
    postprocess: {conf: 0.3}
python: {version: "3.10", wheels: download}
"""


def raw_detector(path):
    """Conv features -> predictions [1, 4 + 3 classes, 64], a YOLOv8-shaped output."""
    rng = np.random.default_rng(4)
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["c"]),
         oh.make_node("Reshape", ["c", "shape"], ["predictions"])],
        "raw",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
        [oh.make_tensor_value_info("predictions", TensorProto.FLOAT, [1, 7, 64])],
        [numpy_helper.from_array(rng.standard_normal((7, 2, 1, 1)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([1, 7, 64], np.int64), "shape")],
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_the_optimize_stage_gates_the_raw_outputs_then_appends_the_head(tmp_path):
    raw = raw_detector(tmp_path / "raw.onnx")
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    (model,) = load_spec(tmp_path / "spec.yaml").models
    converted = Entry("convert", "k", tmp_path, {MODEL_FILE: ""}, {})
    (tmp_path / MODEL_FILE).write_bytes(raw.read_bytes())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    info = _optimize(model, converted, scratch)
    assert [o["name"] for o in info["parity"]["outputs"]] == ["predictions"]
    headed = onnx.load(scratch / MODEL_FILE)
    assert [o.name for o in headed.graph.output] == ["boxes", "scores", "classes",
                                                     "num_detections"]
    x = np.random.default_rng(5).standard_normal((1, 2, 8, 8)).astype(np.float32)
    predictions = run_onnx(onnx.load(raw), {"x": x})["predictions"]
    expected = YOLO_HEAD.reference([predictions], num_classes=3, score_threshold=0.3,
                                   iou_threshold=0.5, max_detections=20)
    got = run_onnx(headed, {"x": x})
    np.testing.assert_array_equal(got["num_detections"], expected[3])
    np.testing.assert_allclose(got["boxes"], expected[0], rtol=1e-5, atol=1e-4)
    app = resolve_app_info(model, raw)
    assert app["postprocess"]["layout"] == "yolo_head"
