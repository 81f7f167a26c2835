"""ONNX Runtime backends: bitwise equal to raw ONNX Runtime on the CPU, custom ops inlined, no
silent provider fallback, and the real CUDA path where a GPU is present."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from edgefuse import runtime
from edgefuse.acl.ops.host import host_runnable_model
from edgefuse.errors import BackendUnavailableError, ModelLoadError
from edgefuse.fallback import ort_session
from edgefuse.fallback.ort_session import OrtSession, session_options
from edgefuse.optimize.append_yolo_head import YoloHeadOptions, append_yolo_head
from tests.model_builders import (
    conv_net,
    fp16_model,
    hardswish_function_model,
    hardswish_reference,
    save,
    swish_model,
    two_input_model,
    uint8_model,
)
from tests.vision.models import constant_model, yolov8_output

pytestmark = pytest.mark.ort

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
needs_cuda = pytest.mark.skipif(
    not HAS_CUDA, reason="this onnxruntime has no CUDAExecutionProvider (no GPU build/machine)")


def _feeds(model: onnx.ModelProto, batch: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value or batch for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 256, dims).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


@pytest.mark.parametrize("build", [conv_net, fp16_model, uint8_model, two_input_model])
def test_cpu_outputs_are_bitwise_those_of_raw_onnxruntime(tmp_path, build):
    model = build()
    path = save(model, tmp_path / "m.onnx")
    feeds = _feeds(model)
    raw = ort.InferenceSession(str(path), ort.SessionOptions(),
                               providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in raw.get_outputs()], raw.run(None, feeds), strict=True))
    with runtime.open_session(path, backends="cpu") as session:
        got = session.run(feeds)
    assert got.keys() == expected.keys()
    for name, array in expected.items():
        assert got[name].dtype == array.dtype
        assert got[name].tobytes() == array.tobytes(), name


def test_fp16_io_keeps_fp16():
    with OrtSession(fp16_model(), "cpu") as session:
        assert session.inputs[0].dtype == np.float16 and session.outputs[0].dtype == np.float16
        x = np.arange(6, dtype=np.float16).reshape(2, 3)
        np.testing.assert_array_equal(session.run({"x": x})["y"], x * np.float16(0.5) + 1)


def test_custom_op_function_is_inlined_and_runs():
    model = hardswish_function_model()
    inlined = host_runnable_model(model)
    assert not inlined.functions
    assert {n.domain for n in inlined.graph.node} == {""}
    assert [o.domain for o in inlined.opset_import] == [""]
    x = np.linspace(-5, 5, 10, dtype=np.float32).reshape(2, 5)
    with OrtSession(model, "cpu") as session:
        np.testing.assert_allclose(session.run({"x": x})["y"], hardswish_reference(x),
                                   rtol=1e-6, atol=1e-6)


def test_custom_op_function_is_inlined_from_a_file(tmp_path):
    path = save(hardswish_function_model(), tmp_path / "custom.onnx")
    x = np.linspace(-5, 5, 10, dtype=np.float32).reshape(2, 5)
    with runtime.open_session(path, backends="cpu") as session:
        np.testing.assert_allclose(session.run({"x": x})["y"], hardswish_reference(x),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("alpha", [None, 1.7])
def test_declared_custom_op_runs_through_its_declared_decomposition(alpha):
    x = np.linspace(-4, 4, 10, dtype=np.float32).reshape(2, 5)
    slope = 1.0 if alpha is None else alpha  # the default must be written out before inlining
    with OrtSession(swish_model(alpha), "cpu") as session:
        np.testing.assert_allclose(session.run({"x": x})["y"], x / (1 + np.exp(-slope * x)),
                                   rtol=1e-6, atol=1e-6)


def test_model_without_functions_is_left_alone():
    model = conv_net()
    assert host_runnable_model(model) is model


def test_custom_op_without_decomposition_is_refused():
    with pytest.raises(ModelLoadError, match=r"edgefuse::HardSwishX without a decomposition"):
        OrtSession(hardswish_function_model(with_function=False), "cpu")


def test_gpu_providers_refuse_cpu_nodes_unless_allowed():
    cuda = session_options("cuda")
    assert cuda.get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    relaxed = session_options("cuda", allow_cpu_nodes=True)
    with pytest.raises(RuntimeError, match="does not have configuration"):
        relaxed.get_session_config_entry("session.disable_cpu_ep_fallback")
    with pytest.raises(RuntimeError, match="does not have configuration"):
        session_options("cpu").get_session_config_entry("session.disable_cpu_ep_fallback")


def test_session_options_are_applied():
    options = session_options("cpu", threads=3, inter_op_threads=1, optimization="basic",
                              mem_pattern=False, cpu_arena=False)
    assert options.intra_op_num_threads == 3 and options.inter_op_num_threads == 1
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert not options.enable_mem_pattern and not options.enable_cpu_mem_arena


def test_missing_provider_is_reported_not_hidden(monkeypatch):
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    found = ort_session.probe_provider("cuda")
    assert not found.ok
    assert "has no CUDAExecutionProvider" in found.reason and "onnxruntime-gpu" in found.reason


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider'")
def test_provider_listed_but_not_created_is_not_a_silent_cpu_session(monkeypatch):
    # ONNX Runtime lists a provider it then cannot create (CUDA libraries missing): it would run
    # on the CPU. edgefuse refuses the session instead.
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert ort_session.probe_provider("cuda").ok
    if HAS_CUDA:
        pytest.skip("this machine really has CUDA")
    with pytest.raises(BackendUnavailableError, match="would run nodes on the CPU instead of "
                       "CUDAExecutionProvider"):
        OrtSession(conv_net(), "cuda")
    with pytest.raises(BackendUnavailableError, match="did not create CUDAExecutionProvider"):
        OrtSession(conv_net(), "cuda", allow_cpu_nodes=True)
    session = runtime.open_session(conv_net(), backends=("cuda", "cpu"))
    with session:
        assert session.backend == "cpu"
        assert "instead of CUDAExecutionProvider" in session.skipped["cuda"]


def test_concurrent_runs_give_the_same_answers():
    model = conv_net()
    feeds = _feeds(model, batch=1)
    with OrtSession(model, "cpu") as session:
        expected = session.run(feeds)["logits"]
        results, errors = [], []

        def work():
            try:
                for _ in range(10):
                    results.append(session.run(feeds)["logits"])
            except Exception as exc:  # noqa: BLE001 - collected and re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    assert len(results) == 40 and all(np.array_equal(r, expected) for r in results)


@needs_cuda
def test_cuda_session_runs_on_the_gpu_with_io_binding():
    model = conv_net()
    feeds = _feeds(model, batch=1)
    with OrtSession(model, "cpu") as cpu, runtime.open_session(model, backends="cuda") as gpu:
        assert gpu.backend == "cuda" and gpu.providers[0] == "CUDAExecutionProvider"
        reference, got = cpu.run(feeds), gpu.run(feeds)
    for name in reference:
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-3, atol=1e-4)


@needs_cuda
def test_cuda_session_handles_fp16_io():
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    with runtime.open_session(fp16_model(), backends="cuda") as gpu:
        out = gpu.run({"x": x})["y"]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, x * np.float16(0.5) + 1)


def test_a_compiled_models_board_op_on_cpu_says_to_use_acl_or_sim(tmp_path):
    """A BUILD_DIR's model holds YoloHead in the default domain (as compile prepares it for ATC,
    no function): ONNX Runtime would say 'No Op registered for YoloHead'; edgefuse names the
    backends that run it."""
    head = append_yolo_head(constant_model(yolov8_output(classes=2), size=32),
                            YoloHeadOptions(layout="yolov8"))
    prepared = onnx.ModelProto()
    prepared.CopyFrom(head)
    for node in prepared.graph.node:
        if node.op_type == "YoloHead":
            node.domain = ""
    del prepared.functions[:]
    onnx.save(prepared, tmp_path / "model.onnx")
    with pytest.raises(ModelLoadError, match=r"(?s)board op YoloHead.*backend acl.*backend sim"):
        OrtSession(tmp_path / "model.onnx", "cpu")
    with pytest.raises(ModelLoadError, match="board op YoloHead"):
        OrtSession(prepared, "cpu")
    with OrtSession(head, "cpu") as session:  # the optimized model, with its decomposition, runs
        assert {o.name for o in session.outputs} >= {"boxes", "num_detections"}
