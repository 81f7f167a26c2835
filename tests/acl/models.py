"""Tiny ONNX graphs for the acl tests, and a way to put the stand-in `atc` on PATH."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import numpy_helper

FAKES = Path(__file__).resolve().parents[1] / "fakes"
node = oh.make_node


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int | str]],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    *,
    opset: int = 11,
    extra_opsets: Mapping[str, int] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """A float model; output shapes come from shape inference where ONNX knows the ops."""
    graph = oh.make_graph(
        list(nodes),
        "test",
        [oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)
         for name, shape in inputs.items()],
        [oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()],
    )
    imports = [oh.make_opsetid("", opset)]
    imports += [oh.make_opsetid(domain, v) for domain, v in (extra_opsets or {}).items()]
    model = oh.make_model(graph, ir_version=8, opset_imports=imports)
    if check:
        model = onnx.shape_inference.infer_shapes(model)
        onnx.checker.check_model(model)
    return model


def conv_relu(opset: int = 11, batch: int | str = 1, size: int = 8) -> onnx.ModelProto:
    """x[batch,3,size,size] -> Conv 3x3 -> Relu -> y."""
    rng = np.random.default_rng(1)
    return make_model(
        [node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         node("Relu", ["c"], ["y"], name="relu")],
        {"x": [batch, 3, size, size]},
        ["y"],
        {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
         "b": rng.standard_normal(4).astype(np.float32)},
        opset=opset,
    )


def put_fake_atc_on_path(monkeypatch, mode: str = "success", argv_file: Path | None = None) -> None:
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_ATC_MODE", mode)
    if argv_file is not None:
        monkeypatch.setenv("FAKE_ATC_ARGV", str(argv_file))


def hide_atc(monkeypatch) -> None:
    """A PATH on which no `atc` (real or fake) can be found."""
    paths = [p for p in os.environ.get("PATH", "").split(os.pathsep)
             if p and not (Path(p) / "atc").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(paths))
