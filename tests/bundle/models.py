"""Small ONNX models and specs for the build tests: no PyTorch, a build in a few seconds.

``write_spec`` writes a spec with two ONNX-file models (a 4-class per-pixel head and a
classifier), a segmentation app and a wheelhouse of stand-in wheels (``wheelhouse``) into a
folder; ``write_detection_spec`` one with a two-class YOLOv8-layout detector (``box_head``) and
its detection app, for the app's trial run before signing (``app_trial``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

from tests.bundle.wheelhouse import HOST_PYTHON, fill_wheelhouse


def _conv(name: str, cin: int, cout: int, rng: np.random.Generator) -> list:
    weight = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.3
    bias = rng.standard_normal(cout).astype(np.float32) * 0.1
    return [numpy_helper.from_array(weight, f"{name}_w"),
            numpy_helper.from_array(bias, f"{name}_b")]


def pixel_head(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """[1,3,S,S] -> Conv -> Relu -> Conv -> [1,4,S,S] logits."""
    rng = np.random.default_rng(seed)
    inits = _conv("c1", 3, 8, rng) + _conv("c2", 8, 4, rng)
    nodes = [
        oh.make_node("Conv", ["images", "c1_w", "c1_b"], ["h"], name="c1", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["h"], ["r"], name="relu"),
        oh.make_node("Conv", ["r", "c2_w", "c2_b"], ["logits"], name="c2", pads=[1, 1, 1, 1]),
    ]
    graph = oh.make_graph(
        nodes, "pixel_head",
        [oh.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4, size, size])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


def classifier(seed: int = 1, size: int = 16) -> onnx.ModelProto:
    """[1,3,S,S] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> [1,8]."""
    rng = np.random.default_rng(seed)
    inits = _conv("c1", 3, 8, rng)
    nodes = [
        oh.make_node("Conv", ["input", "c1_w", "c1_b"], ["h"], name="c1", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["h"], ["r"], name="relu"),
        oh.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        oh.make_node("Flatten", ["p"], ["scores"], name="flat"),
    ]
    graph = oh.make_graph(
        nodes, "classifier",
        [oh.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [oh.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 8])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


SPEC = """\
apiVersion: edgefuse/v1
bundle:
  name: small
  version: "{version}"
target:
  soc: Ascend310B4
  board: build-host        # described, not from the table: its Python is this test's
  glibc: "2.17"
  arch: aarch64
reproducibility:
  source_date_epoch: 1767225600
models:
  - name: seg
    source: models/seg.onnx
    task: segment
    classes: [bg, a, b, c]
    precision: {{keep_fp32: none}}
    verify: {{samples: 1, fp16_min_cosine: {fp16_gate}}}
  - name: cls
    source: models/cls.onnx
    task: classify
    precision: {{keep_fp32: none}}
    verify: {{samples: 1}}
app:
  kind: segmentation
  model: seg
  source: 0
  backend: [acl, cpu]
service:
  environment: {{EDGEFUSE_LOG: info}}
python:
  version: "{python}"
  wheels: wheelhouse
"""


def write_spec(folder: Path, *, version: str = "1.0.0", fp16_gate: float = 0.999) -> Path:
    """The two-model spec and its ONNX files in ``folder``; returns the spec's path."""
    (folder / "models").mkdir(parents=True, exist_ok=True)
    for name, model in (("seg", pixel_head()), ("cls", classifier())):
        path = folder / "models" / f"{name}.onnx"
        if not path.exists():
            onnx.save_model(model, str(path))
    fill_wheelhouse(folder / "wheelhouse")
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(version=version, fp16_gate=fp16_gate, python=HOST_PYTHON),
                    encoding="utf-8")
    return spec


def without_app(text: str) -> str:
    """The spec text of ``write_spec`` without its app and service sections (no service)."""
    return text[: text.index("app:\n")] + text[text.index("python:\n"):]


def silu_head(seed: int = 2, size: int = 16) -> onnx.ModelProto:
    """[1,3,S,S] -> Conv -> x * Sigmoid(x) -> [1,8,S,S]: optimize for an Ascend soc makes Swish."""
    rng = np.random.default_rng(seed)
    inits = _conv("c1", 3, 8, rng)
    nodes = [
        oh.make_node("Conv", ["images", "c1_w", "c1_b"], ["h"], name="c1", pads=[1, 1, 1, 1]),
        oh.make_node("Sigmoid", ["h"], ["s"], name="sig"),
        oh.make_node("Mul", ["h", "s"], ["features"], name="mul"),
    ]
    graph = oh.make_graph(
        nodes, "silu_head",
        [oh.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [oh.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8, size, size])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


def box_head(classes: int = 2, size: int = 32) -> onnx.ModelProto:
    """[1,3,S,S] -> AveragePool/8 -> Conv 1x1 -> Sigmoid -> [1, 4 + classes, (S/8)^2]: a
    detector output in YOLOv8's layout (boxes, then one score per class, per anchor)."""
    rng = np.random.default_rng(3)
    channels = 4 + classes
    weight = (rng.standard_normal((channels, 3, 1, 1)) * 0.3).astype(np.float32)
    anchors = (size // 8) ** 2
    nodes = [
        oh.make_node("AveragePool", ["images"], ["p"], name="pool", kernel_shape=[8, 8],
                     strides=[8, 8]),
        oh.make_node("Conv", ["p", "w", "b"], ["c"], name="conv"),
        oh.make_node("Sigmoid", ["c"], ["s"], name="sig"),
        oh.make_node("Reshape", ["s", "shape"], ["output0"], name="flat"),
    ]
    inits = [numpy_helper.from_array(weight, "w"),
             numpy_helper.from_array(np.zeros(channels, np.float32), "b"),
             numpy_helper.from_array(np.array([1, channels, anchors], np.int64), "shape")]
    graph = oh.make_graph(
        nodes, "box_head",
        [oh.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [oh.make_tensor_value_info("output0", TensorProto.FLOAT, [1, channels, anchors])],
        inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


DETECTION_SPEC = """\
apiVersion: edgefuse/v1
bundle:
  name: boxes
  version: "1.0.0"
target:
  soc: Ascend310B4
  board: build-host        # described, not from the table: its Python is this test's
  glibc: "2.17"
  arch: aarch64
reproducibility:
  source_date_epoch: 1767225600
models:
  - name: detector
    source: models/boxes.onnx
    task: detect
    classes: {classes}
    preprocess: {{size: [32, 32]}}
    postprocess: {{layout: yolov8}}
    precision: {{keep_fp32: none}}
    verify: {{samples: 1}}
app:
  kind: detection
  model: detector
  source: 0
  sinks: {{jsonl: /var/lib/edgefuse/boxes/detections.jsonl}}
  backend: [acl, cpu]
  config: {config}
service:
  environment: {{EDGEFUSE_LOG: info}}
python:
  version: "{python}"
  wheels: wheelhouse
"""


def write_detection_spec(folder: Path, *, classes: str = "[a, b]",
                         config: str = "{stride: 1}") -> Path:
    """A spec with one two-class ``box_head`` detector and its detection app (``classes`` and
    the app's ``config`` as YAML text); returns the spec's path."""
    (folder / "models").mkdir(parents=True, exist_ok=True)
    path = folder / "models" / "boxes.onnx"
    if not path.exists():
        onnx.save_model(box_head(), str(path))
    fill_wheelhouse(folder / "wheelhouse")
    spec = folder / "spec.yaml"
    spec.write_text(DETECTION_SPEC.format(classes=classes, config=config, python=HOST_PYTHON),
                    encoding="utf-8")
    return spec
