"""The sim backend against the board's contract: the manifest's I/O, FP16 numerics against numpy,
the precision record, AIPP frames, gears refused as the board refuses them, the soc, the memory
footprint computed by hand, custom ops, and sim staying opt-in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse import open_session
from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.compile.precision import KeepFp32
from edgefuse.acl.session import AclSession
from edgefuse.errors import BackendUnavailableError, InputError, ModelLoadError
from edgefuse.fallback.sim_numerics import plan_numerics
from edgefuse.fallback.sim_session import SimSession, probe_sim
from edgefuse.fallback.sim_target import NOT_SIMULATED, parse_memory, sim_target
from edgefuse.manifest import read_manifest
from edgefuse.model_source import resolve_source
from edgefuse.runtime import DEFAULT_BACKENDS, LAST_RESORT
from edgefuse.session import TensorSpec
from tests.model_builders import IR_VERSION, OPSET, conv_net, fp16_model, save, swish_model
from tests.needs import optional

pytestmark = pytest.mark.ort

GIB = 1 << 30


@pytest.fixture(autouse=True)
def no_atc(monkeypatch):
    monkeypatch.setenv("PATH", "")  # compile writes the build; there is no OM here


def _build(tmp_path, model, name="build", **options):
    source = save(model, tmp_path / f"{name}.onnx")
    compile_model(source, options.pop("soc", "Ascend310B4"), tmp_path / name, **options)
    return tmp_path / name


def cancellation_model() -> onnx.ModelProto:
    """y = x * 1.5 - 2048 with named nodes: at x = 1366, FP32 gives 1 and FP16 storage gives 0
    (1366 * 1.5 = 2049 is not an FP16 number; it rounds to 2048)."""
    graph = oh.make_graph(
        [oh.make_node("Mul", ["x", "k"], ["m"], name="mul"),
         oh.make_node("Sub", ["m", "c"], ["y"], name="sub")],
        "cancel",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(1.5, np.float32), "k"),
         numpy_helper.from_array(np.array(2048.0, np.float32), "c")],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                         ir_version=IR_VERSION)


X_CANCEL = np.array([[1366.0, 1000.0, 1.0, -3.0]], np.float32)


def _fp16(values) -> np.ndarray:
    return np.asarray(values, np.float32).astype(np.float16).astype(np.float32)


# --- I/O: exactly the manifest's -------------------------------------------------------------

def test_specs_and_layouts_are_the_manifests(tmp_path):
    """conv_net, written out by hand: x [1, 3, 8, 8] NCHW -> logits [1, 5], features [1, 4]."""
    build = _build(tmp_path, conv_net())
    f32 = np.dtype(np.float32)
    with open_session(build, backends="sim") as session:
        assert session.backend == "sim" and session.soc == "Ascend310B4"
        assert list(session.inputs) == [TensorSpec("x", (1, 3, 8, 8), f32)]
        assert list(session.outputs) == [TensorSpec("logits", (1, 5), f32),
                                         TensorSpec("features", (1, 4), f32)]
        assert session.layouts == {"x": "NCHW", "logits": None, "features": None}
        outputs = session.run({"x": np.ones((1, 3, 8, 8), np.float32)})
        assert {n: (a.dtype, a.shape) for n, a in outputs.items()} == {
            "logits": (np.float32, (1, 5)), "features": (np.float32, (1, 4))}


@pytest.mark.standin
@pytest.mark.parametrize("feed", [np.zeros((1, 3, 8, 8), np.float64),
                                  np.zeros((1, 3, 8, 8), np.int32),
                                  np.zeros((1, 3, 9, 8), np.float32),
                                  np.zeros((3, 8, 8), np.float32)],
                         ids=["float64", "int32", "height", "rank"])
def test_a_wrong_dtype_or_shape_raises_the_boards_input_error(tmp_path, standin, feed):
    from acl_standin import FakeOm, FakeTensor

    build = _build(tmp_path, conv_net())
    f32 = np.dtype(np.float32)
    om = FakeOm(inputs=[FakeTensor("x", (1, 3, 8, 8), f32)],
                outputs=[FakeTensor("logits", (1, 5), f32), FakeTensor("features", (1, 4), f32)],
                compute=lambda f: [np.zeros((1, 5)), np.zeros((1, 4))])
    (tmp_path / "board").mkdir()
    board_om = standin.register_model(tmp_path / "board" / "model.om", om)
    errors = []
    with AclSession(board_om) as board, open_session(build, backends="sim") as sim:
        for session in (board, sim):
            with pytest.raises(InputError, match="input 'x'") as caught:
                session.run({"x": feed})
            errors.append(caught.value)
    board_error, sim_error = errors
    assert type(board_error) is type(sim_error)
    assert (board_error.message, board_error.reference) == (sim_error.message,
                                                            sim_error.reference)


def test_outputs_are_fp32_by_default_and_fp16_with_output_type_fp16(tmp_path):
    x = {"x": X_CANCEL}
    default = _build(tmp_path, cancellation_model(), "default")
    half = _build(tmp_path, cancellation_model(), "half", output_type="FP16")
    assert read_manifest(half).outputs[0].dtype == "float16"
    assert read_manifest(half).extra["output_type"] == "FP16"
    with open_session(default, backends="sim") as a, open_session(half, backends="sim") as b:
        assert a.outputs[0].dtype == np.float32 and b.outputs[0].dtype == np.float16
        y32, y16 = a.run(x)["y"], b.run(x)["y"]
    assert y32.dtype == np.float32 and y16.dtype == np.float16
    np.testing.assert_array_equal(y16.astype(np.float32), y32)


def test_output_type_is_refused_for_a_model_with_an_integer_output(tmp_path):
    graph = oh.make_graph([oh.make_node("ArgMax", ["x"], ["i"], axis=1)], "argmax",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [oh.make_tensor_value_info("i", TensorProto.INT64, [1, 1])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                          ir_version=IR_VERSION)
    with pytest.raises(InputError, match="--output-type FP16 applies to every output, and "
                                         "output 'i' is int64"):
        _build(tmp_path, model, output_type="FP16")
    assert not (tmp_path / "build").exists()


# --- FP16 numerics, from the build's precision record ------------------------------------------

def test_force_fp16_stores_every_tensor_in_fp16(tmp_path):
    build = _build(tmp_path, cancellation_model())
    with open_session(build, backends="sim") as sim, open_session(build, backends="cpu") as cpu:
        got, host = sim.run({"x": X_CANCEL})["y"], cpu.run({"x": X_CANCEL})["y"]
    expected = _fp16(_fp16(_fp16(X_CANCEL) * 1.5) - 2048.0)  # every tensor rounded, numpy
    np.testing.assert_array_equal(got, expected)
    assert got[0, 0] == 0.0 and host[0, 0] == 1.0  # the FP32 host does not see the cancellation


def test_nodes_the_build_keeps_fp32_stay_fp32(tmp_path):
    both = _build(tmp_path, cancellation_model(), "both", keep_fp32=KeepFp32(("mul", "sub")))
    mul = _build(tmp_path, cancellation_model(), "mul", keep_fp32=KeepFp32(("mul",)))
    with open_session(both, backends="sim") as a, open_session(mul, backends="sim") as b:
        assert a.numerics.keep == {"mul", "sub"}
        kept, half_kept = a.run({"x": X_CANCEL})["y"], b.run({"x": X_CANCEL})["y"]
    np.testing.assert_array_equal(kept, _fp16(X_CANCEL) * 1.5 - 2048.0)
    # sub is FP16 again: it reads the kept product rounded, as the board casts it for sub
    np.testing.assert_array_equal(half_kept, _fp16(_fp16(_fp16(X_CANCEL) * 1.5) - 2048.0))


def test_must_keep_origin_dtype_runs_fp32(tmp_path):
    build = _build(tmp_path, cancellation_model(), precision="must_keep_origin_dtype")
    with open_session(build, backends="sim") as session:
        assert session.numerics.exact and not session.numerics.rounds
        np.testing.assert_array_equal(session.run({"x": X_CANCEL})["y"], X_CANCEL * 1.5 - 2048)


def test_a_build_of_an_fp16_model_rounds_exactly_its_fp16_tensors(tmp_path):
    build = _build(tmp_path, fp16_model())  # y = x * 0.5 + 1, float16 in and out
    x = np.array([[1.0, 2049.0, -3.3], [0.1, 0.2, 4095.0]], np.float16)
    with open_session(build, backends="sim") as session:
        assert session.inputs[0].dtype == session.outputs[0].dtype == np.float16
        assert "declares its FP16 tensors" in session.numerics.note
        y = session.run({"x": x})["y"]
    half = np.float16
    np.testing.assert_array_equal(y, (x * half(0.5)).astype(half) + half(1))


def test_precision_modes_are_planned_and_approximations_say_so():
    model = conv_net()
    for node, name in zip(model.graph.node, ["conv", "relu", "gap", "flat", "fc"], strict=True):
        node.name = name
    force = plan_numerics(model, {"precision_mode": "force_fp16", "keep_dtype_nodes": ["fc"]})
    assert force.exact and force.rounds and force.kept_nodes(model) == {"fc"}
    cube = plan_numerics(model, {"precision_mode": "allow_fp32_to_fp16"})
    assert not cube.exact and "approximated" in cube.note
    assert cube.kept_nodes(model) == {"relu", "gap", "flat"}  # Conv and Gemm are Cube ops
    mixed = plan_numerics(model, {"precision_mode": "allow_mix_precision"})
    assert not mixed.exact and mixed.rounds and "black and gray lists" in mixed.note
    fp32 = plan_numerics(model, {"precision_mode": "cube_fp16in_fp32out"})
    assert not fp32.exact and not fp32.rounds
    assert plan_numerics(model, None).mode == "force_fp16"


# --- custom ops ----------------------------------------------------------------------------------

def test_custom_ops_run_through_their_reference_decomposition(tmp_path):
    from edgefuse.acl.ops.registry import OPS_BY_NAME

    build = _build(tmp_path, swish_model(alpha=0.5))
    assert read_manifest(build).extra["custom_ops"]["required"]  # the OM needs the op package
    x = np.linspace(-6, 6, 10, dtype=np.float32).reshape(2, 5)
    with open_session(build, backends="sim") as session:
        got = session.run({"x": x})["y"]
    (reference,) = OPS_BY_NAME["Swish"].reference([x], alpha=0.5)
    np.testing.assert_allclose(got, reference, rtol=2e-3, atol=1e-3)  # FP16 storage
    assert not np.array_equal(got, reference)  # ... which it does apply


# --- AIPP ---------------------------------------------------------------------------------------

def _image_net() -> onnx.ModelProto:
    """3x32x32 -> Conv(8, 3x3) -> Relu -> GlobalAveragePool -> Gemm(6): an image classifier."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3)
                                       .astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b"),
               numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "fc")]
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         oh.make_node("Relu", ["c"], ["r"]),
         oh.make_node("GlobalAveragePool", ["r"], ["g"]),
         oh.make_node("Flatten", ["g"], ["f"]),
         oh.make_node("Gemm", ["f", "fc"], ["logits"], transB=1)],
        "image_net", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 6])], weights)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                         ir_version=IR_VERSION)


def _smooth_bgr(height: int, width: int) -> np.ndarray:
    """A camera-like BGR frame: gradients and a disc, smooth enough for 4:2:0 chroma."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    disc = ((y - height / 2) ** 2 + (x - width / 3) ** 2 < (height / 4) ** 2) * 90.0
    bgr = np.stack([40 + 150 * x / width, 200 - 120 * y / height, 60 + disc + 60 * y / height],
                   axis=-1)
    return np.clip(bgr, 0, 255).astype(np.uint8)


MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def _nv12_to_rgb(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """An app's own NV12 -> RGB in float (JFIF full-range BT.601, chroma repeated per 2x2)."""
    luma = frame[:height].astype(np.float64)
    chroma = frame[height:].reshape(height // 2, width // 2, 2).astype(np.float64) - 128
    u, v = (chroma[..., i].repeat(2, axis=0).repeat(2, axis=1) for i in (0, 1))
    rgb = np.stack([luma + 1.402 * v, luma - 0.344136 * u - 0.714136 * v, luma + 1.772 * u], -1)
    return np.clip(np.rint(rgb), 0, 255)


def _normalized(rgb: np.ndarray, shift: float = 0.0) -> np.ndarray:
    """The app's normalisation, NCHW: (pixel - shift - mean) / std."""
    tensor = (rgb.astype(np.float32) - shift - np.array(MEAN, np.float32)) / np.array(STD,
                                                                                       np.float32)
    return np.ascontiguousarray(tensor.transpose(2, 0, 1)[np.newaxis]).astype(np.float32)


@pytest.mark.parametrize("input_format", ["RGB888", "BGR888", "YUV420SP"])
def test_an_aipp_frame_on_sim_matches_numpy_preprocessing_on_cpu(tmp_path, input_format):
    optional("cv2")  # AippSpec.frame_from_bgr resizes with OpenCV
    from edgefuse.acl.compile.aipp import AippSpec
    from edgefuse.testing import assert_outputs_close

    spec = AippSpec.from_dict({"input_format": input_format, "source_size": [36, 34],
                               "crop": [2, 0, 32, 32], "mean": list(MEAN), "std": list(STD)})
    build = _build(tmp_path, _image_net(), aipp=spec)
    plain = _build(tmp_path, _image_net(), "plain")
    image = _smooth_bgr(34, 36)
    frame = spec.frame_from_bgr(image)[np.newaxis]
    # the app's own preprocessing of that frame, in numpy: to RGB, crop, normalise, NCHW
    yuv = input_format == "YUV420SP"
    rgb = _nv12_to_rgb(frame[0], 34, 36) if yuv else \
        frame[0][..., ::-1] if input_format == "BGR888" else frame[0]
    rgb = rgb[0:32, 2:34]
    with open_session(build, backends="sim") as sim, open_session(plain, backends="cpu") as cpu:
        assert sim.inputs[0].dtype == np.uint8
        assert sim.inputs[0].shape == ((1, 51, 36) if yuv else (1, 34, 36, 3))
        assert sim.layouts["x"] == ("YUV420SP" if yuv else "NHWC")
        got, expected = sim.run({"x": frame}), cpu.run({"x": _normalized(rgb)})
        tolerance = 1e-2 * float(np.abs(expected["logits"]).max())  # the FP16 gate
        if yuv:
            # AIPP's CSC is integer arithmetic, ``(M @ (yuv - bias)) >> 8``: it truncates by up
            # to one pixel level where the app's float conversion rounds; allow what one level
            # lower in every channel changes in the outputs on top of the FP16 gate.
            lower = cpu.run({"x": _normalized(rgb, shift=1.0)})
            tolerance += float(np.abs(lower["logits"] - expected["logits"]).max())
    assert_outputs_close(got, expected, fp16=True, max_abs_error=tolerance)
    if yuv:  # ... and without that allowance the CSC's truncation shows
        with pytest.raises(AssertionError, match="output 'logits': max abs error"):
            assert_outputs_close(got, expected, fp16=True)


def _identity(size: int = 8) -> onnx.ModelProto:
    graph = oh.make_graph([oh.make_node("Identity", ["x"], ["y"], name="same")], "same",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, size, size])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                         ir_version=IR_VERSION)


def test_the_aipp_output_reaches_the_network_in_fp16_on_sim_only(tmp_path):
    """AIPP hands the AI Core FP16 whatever the precision mode: an FP32-exact build of an
    identity shows the normalised frame, every value an FP16 number on sim and within FP16
    rounding of (pixel - mean) / std computed here; the cpu backend keeps float32."""
    from edgefuse.acl.compile.aipp import AippSpec

    spec = AippSpec.from_dict({"input_format": "RGB888", "source_size": [8, 8],
                               "mean": list(MEAN), "std": list(STD)})
    build = _build(tmp_path, _identity(), aipp=spec, precision="must_keep_origin_dtype")
    frame = np.random.default_rng(0).integers(0, 256, (1, 8, 8, 3), dtype=np.uint8)
    expected = _normalized(frame[0].astype(np.float32))
    with open_session(build, backends="sim") as sim, open_session(build, backends="cpu") as cpu:
        assert sim.numerics.exact
        on_sim, on_cpu = sim.run({"x": frame})["y"], cpu.run({"x": frame})["y"]
    np.testing.assert_array_equal(on_sim, _fp16(on_sim))
    np.testing.assert_allclose(on_sim, expected, rtol=1e-3, atol=1e-3)
    assert not np.array_equal(on_cpu, _fp16(on_cpu))
    np.testing.assert_allclose(on_cpu, expected, rtol=1e-5, atol=1e-5)


# --- gears ---------------------------------------------------------------------------------------

def test_batch_gears_run_on_sim_and_refuse_a_batch_above_them(tmp_path):
    build = _build(tmp_path, conv_net("N"), dynamic_batch=[1, 2, 4])
    with open_session(build, backends="sim") as sim, open_session(build, backends="cpu") as cpu:
        assert sim.gears.kind == "batch" and sim.gears.values == (1, 2, 4)
        assert sim.inputs[0].shape[0] == read_manifest(build).inputs[0].shape[0]
        x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
        assert sim.run({"x": x})["logits"].shape == (3, 5)  # as the board: the next gear, cut
        with pytest.raises(InputError, match="model.om has no batch gear for batch 5") as caught:
            sim.run({"x": np.zeros((5, 3, 8, 8), np.float32)})
        assert caught.value.reference == "no-matching-gear"
        assert caught.value.context == "gears: [1, 2, 4]"
        assert cpu.run({"x": np.zeros((5, 3, 8, 8), np.float32)})["logits"].shape == (5, 5)


def test_image_size_gears_must_match_exactly(tmp_path):
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "relu",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)],
                          ir_version=IR_VERSION)
    build = _build(tmp_path, model, dynamic_image_size=[(8, 8), (16, 12)])
    with open_session(build, backends="sim") as sim:
        for height, width in ((8, 8), (16, 12)):
            x = np.full((1, 3, height, width), -1.0, np.float32)
            assert sim.run({"x": x})["y"].shape == (1, 3, height, width)
        with pytest.raises(InputError, match=r"no hw gear for image size \(12, 16\)"):
            sim.run({"x": np.zeros((1, 3, 12, 16), np.float32)})
        # validation off changes nothing: the gear check is the OM's, not the feed check's
        sim.validate = False
        with pytest.raises(InputError, match="no hw gear"):
            sim.run({"x": np.zeros((1, 3, 12, 16), np.float32)})


@pytest.mark.standin
def test_sim_and_board_refuse_an_off_gear_batch_with_the_same_error(tmp_path, standin):
    from acl_standin import FakeOm, FakeTensor

    build = _build(tmp_path, conv_net("N"), dynamic_batch=[1, 2, 4])
    f32 = np.dtype(np.float32)
    om = FakeOm(inputs=[FakeTensor("x", (-1, 3, 8, 8), f32, max_dims=(4, 3, 8, 8))],
                outputs=[FakeTensor("logits", (-1, 5), f32, max_dims=(4, 5)),
                         FakeTensor("features", (-1, 4), f32, max_dims=(4, 4))],
                compute=lambda f: [np.zeros((len(f["x"]), 5)), np.zeros((len(f["x"]), 4))],
                batch_gears=(1, 2, 4))
    (tmp_path / "board").mkdir()
    board_om = standin.register_model(tmp_path / "board" / "model.om", om)
    x = np.zeros((6, 3, 8, 8), np.float32)
    with AclSession(board_om) as board, open_session(build, backends="sim") as sim:
        errors = []
        for session in (board, sim):
            with pytest.raises(InputError) as caught:
                session.run({"x": x})
            errors.append(caught.value)
    board_error, sim_error = errors
    assert type(board_error) is type(sim_error)
    assert (board_error.message, board_error.context, board_error.hint, board_error.reference) \
        == (sim_error.message, sim_error.context, sim_error.hint, sim_error.reference)


# --- the board's limits: soc and memory -----------------------------------------------------------

def test_a_build_for_another_soc_is_refused(tmp_path):
    build = _build(tmp_path, conv_net(), soc="Ascend310P3")
    with pytest.raises(BackendUnavailableError, match="no backend in \\(sim\\)") as caught:
        open_session(build, backends="sim")
    assert "sim: model.om was compiled for Ascend310P3, the simulated device is Ascend310B4" \
        in caught.value.context
    with pytest.raises(BackendUnavailableError, match="compiled for Ascend310P3, the simulated "
                                                      "device is Ascend310B4") as direct:
        SimSession(build)
    assert "--sim-soc Ascend310P3" in direct.value.hint
    with open_session(build, backends="sim", soc="Ascend310P3", memory="24GiB") as session:
        assert session.soc == "Ascend310P3" and session.target.memory == 24 * GIB


def test_the_footprint_is_weights_peak_activations_and_io(tmp_path):
    build = _build(tmp_path, conv_net())
    with open_session(build, backends="sim") as session:
        footprint = session.footprint
    # by hand: 137 float weights stored FP16; Conv and Relu outputs (4x8x8 FP16 each) alive
    # together; I/O: the float32 input 3x8x8 and outputs 5 + 4
    assert footprint.weights == 137 * 2
    assert footprint.activations == 2 * 4 * 8 * 8 * 2
    assert footprint.io == (3 * 8 * 8 + 5 + 4) * 4
    assert footprint.total == 2102 and footprint.unknown == ()


def test_a_model_larger_than_the_boards_memory_is_refused_with_the_figures(tmp_path):
    build = _build(tmp_path, conv_net())
    with pytest.raises(ModelLoadError, match=r"needs 2.1 KiB of board memory, more than the "
                                             r"2.0 KiB of the simulated Atlas 200I DK A2 "
                                             r"\(Ascend310B4\)") as caught:
        open_session(build, backends="sim", memory=2048)
    assert caught.value.reference == "board-memory-exceeded"
    assert "weights 274 B + peak activations 1.0 KiB + I/O buffers 804 B" in caught.value.context
    assert caught.value.hint.endswith("memory='1MiB' (--sim-memory 1MiB)")
    with open_session(build, backends="sim", memory=2102) as session:  # exactly enough
        assert session.target.memory == 2102


def test_gear_builds_are_sized_at_their_largest_gear(tmp_path):
    build = _build(tmp_path, conv_net("N"), dynamic_batch=[1, 2, 4])
    with open_session(build, backends="sim") as session:
        assert session.footprint.io == 4 * (3 * 8 * 8 + 5 + 4) * 4
        assert session.footprint.activations == 4 * 2 * 4 * 8 * 8 * 2


def test_the_default_board_is_the_200i_dk_a2_with_4_gib():
    target = sim_target()
    assert (target.soc, target.board, target.memory) == ("Ascend310B4", "Atlas 200I DK A2",
                                                         4 * GIB)
    assert parse_memory("4GiB") == parse_memory(4 * GIB) == 4 * GIB
    assert parse_memory("512 MiB") == 512 << 20 and parse_memory("1.5GB") == 1_500_000_000
    for bad in ("lots", "-1GiB", 0, "4 TiB", True):
        with pytest.raises(InputError, match="memory must be a positive number of bytes"):
            parse_memory(bad)
    with pytest.raises(InputError, match="no default memory for a board with Ascend310P3"):
        sim_target("Ascend310P3")
    with pytest.raises(InputError, match="unknown soc 'Ascend999'"):
        sim_target("Ascend999")


# --- opt-in, probe, what is not simulated -------------------------------------------------------

def test_sim_is_opt_in_and_never_the_last_resort(tmp_path):
    assert "sim" not in DEFAULT_BACKENDS and LAST_RESORT != "sim"
    build = _build(tmp_path, conv_net())
    with open_session(build) as session:  # the default order, ending in the last resort
        assert session.backend == "cpu"


def test_sim_needs_a_build(tmp_path):
    path = save(conv_net(), tmp_path / "net.onnx")
    found = probe_sim(resolve_source(path))
    assert not found.ok and "is not a BUILD_DIR" in found.reason
    with pytest.raises(BackendUnavailableError, match="net.onnx is not a BUILD_DIR"):
        open_session(path, backends="sim")


def test_the_limits_are_listed_in_the_docs_as_in_the_code():
    text = "\n".join(NOT_SIMULATED)
    for limit in ("speed", "AI Core vs AI CPU placement", "exact kernel arithmetic"):
        assert limit in text
    docs = (Path(__file__).resolve().parents[2] / "docs" / "sim.md").read_text(encoding="utf-8")
    listed = docs.split("## What it does not simulate", 1)[1].split("\n## ", 1)[0]
    assert [line[2:] for line in listed.splitlines() if line.startswith("- ")] == \
        list(NOT_SIMULATED)
