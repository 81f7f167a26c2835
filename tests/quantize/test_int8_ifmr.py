"""IFMR, the activation calibration of CANN's PTQ, against hand-computed cases; the emulation's
activation scales and the simple config the board gets come from the same search."""

import cv2
import numpy as np
import onnx
import pytest

from edgefuse.errors import InputError
from edgefuse.quantize import ifmr
from edgefuse.quantize.ifmr import ActivationSketch, IfmrConfig, fake_quantize, ifmr_search
from edgefuse.quantize.int8 import write_int8_calibration
from edgefuse.quantize.int8_emulate import Int8Emulation
from edgefuse.reference.onnx_runner import run_onnx, with_outputs
from tests.quantize.graphs import conv_net, make_model, node
from tests.quantize.test_int8_calibration import PHOTOS, STRETCH, _photos


@pytest.mark.unit
def test_the_search_picks_the_clip_with_the_least_error_by_hand():
    # Ten values 0.5 and one 1.0 (the maximum); candidates 0.98, 1.00, 1.02 x clip_max_init = 1.0,
    # clip_min 0 (the range holds 0), offset -(round(0 / scale) + 128) = -128:
    #   0.98: scale 0.98/255; 1.0 -> 260.2 -> 260 - 128 = 132, clipped to 127 -> 0.98, error 0.02;
    #         0.5 -> 130.1 -> 130 -> 130 * 0.98/255 = 0.49961, error 0.00039 ten times
    #   1.00: scale 1/255; 0.5 -> 127.5 -> 128 (to even) -> 0.50196, error 0.00196 ten times
    #   1.02: scale 1.02/255 = 0.004; 0.5 -> 125 and 1.0 -> 250, both exact: error 0
    config = IfmrConfig(max_percentile=1.0, min_percentile=1.0, search_range_start=0.98,
                        search_range_end=1.02, search_step=0.02)
    np.testing.assert_allclose(config.ratios, [0.98, 1.0, 1.02])
    chosen = ifmr_search(np.array([0.5] * 10 + [1.0], np.float32), config)
    assert chosen.ratio == pytest.approx(1.02)
    assert chosen.scale == pytest.approx(0.004) and chosen.offset == -128
    assert chosen.clip_min == 0.0 and chosen.clip_max == pytest.approx(1.02)
    assert chosen.loss < 1e-12
    # The losses the other two would have had, by the arithmetic above.
    values = np.array([0.5] * 10 + [1.0], np.float32)
    at_098 = np.mean((fake_quantize(values, 0.98 / 255, -128) - values) ** 2)
    at_100 = np.mean((fake_quantize(values, 1 / 255, -128) - values) ** 2)
    assert at_098 == pytest.approx((0.02 ** 2 + 10 * (0.5 - 130 * 0.98 / 255) ** 2) / 11,
                                   rel=1e-3)
    assert at_100 == pytest.approx(10 * (128 / 255 - 0.5) ** 2 / 11, rel=1e-3)


@pytest.mark.unit
def test_percentiles_set_the_initial_clips_and_the_offset_by_hand():
    # -2 .. 7: the 0.9 point ascending is the 9th value (6), descending the 9th (-1).
    values = np.arange(10, dtype=np.float32) - 2
    one_candidate = dict(search_range_start=1.0, search_range_end=1.001, search_step=0.01)
    asymmetric = ifmr_search(values, IfmrConfig(max_percentile=0.9, min_percentile=0.9,
                                                **one_candidate))
    # scale (6 - (-1)) / 255; offset -(round(-1 / scale) + 128) = -(round(-36.43) + 128) = -92
    assert (asymmetric.clip_min, asymmetric.clip_max) == (-1.0, 6.0)
    assert asymmetric.scale == pytest.approx(7 / 255) and asymmetric.offset == -92
    # 7 lies beyond the clip: 255 - 92 = 163, clipped to 127 -> (127 + 92) * 7/255
    assert fake_quantize(np.float32([7.0]), asymmetric.scale, asymmetric.offset)[0] == \
        pytest.approx(219 * 7 / 255)
    symmetric = ifmr_search(values, IfmrConfig(max_percentile=0.9, min_percentile=0.9,
                                               activation_offset=False, **one_candidate))
    assert symmetric.scale == pytest.approx(6 / 127) and symmetric.offset == 0


@pytest.mark.unit
def test_a_constant_tensor_gets_the_devices_unit_scale_and_bad_settings_are_refused():
    zeros = ifmr_search(np.zeros(16, np.float32))
    assert (zeros.scale, zeros.offset) == (1.0, -128)
    with pytest.raises(InputError, match="search range"):
        IfmrConfig(search_range_start=1.3, search_range_end=0.7)
    with pytest.raises(InputError, match="max_percentile"):
        IfmrConfig(max_percentile=0.2)
    with pytest.raises(InputError, match="finite"):
        ifmr_search(np.array([1.0, np.nan], np.float32))


@pytest.mark.ort
def test_the_emulation_and_the_simple_config_use_the_same_ifmr_settings(tmp_path):
    config = IfmrConfig(search_range_start=0.8, search_range_end=1.2, search_step=0.02,
                        max_percentile=0.99, min_percentile=0.99)
    out = tmp_path / "q"
    write_int8_calibration(conv_net(), out, inputs=PHOTOS, preprocess=STRETCH, emulate=True,
                           ifmr=config)
    simple = (out / "simple_config.cfg").read_text()
    for line in ("search_range_start: 0.8", "search_range_end: 1.2", "search_step: 0.02",
                 "max_percentile: 0.99", "min_percentile: 0.99", "activation_offset: true"):
        assert line in simple
    emulated = onnx.load(out / "host_int8.qdq.onnx")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in emulated.graph.initializer}
    # The input's scale and zero point are IFMR's over the calibration .bin with those settings.
    expected = ifmr_search(np.fromfile(out / "input0.bin", np.float32), config)
    assert float(inits["x_scale"]) == pytest.approx(expected.scale, rel=1e-6)
    assert int(inits["x_zero_point"]) == expected.offset + 128
    # Outputs of quantized layers stay float: the board dequantizes after each one.
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] in ("c1", "c2")
                   for n in emulated.graph.node)


@pytest.mark.unit
def test_samples_added_one_at_a_time_give_the_search_over_all_of_them(monkeypatch):
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(1000).astype(np.float32) * (i + 1) for i in range(3)]
    config = IfmrConfig(max_percentile=0.99, min_percentile=0.99)
    sketch = ActivationSketch(3000, config)
    for sample in samples:
        sketch.add(sample)
    together = np.concatenate(samples)
    assert sketch.search() == ifmr_search(together, config)
    # The percentile points are exact: the 2970th value ascending, the 31st.
    ordered = np.sort(together)
    assert sketch.search().clip_min == ordered[30]
    assert sketch.search().clip_max == pytest.approx(ordered[2969] * sketch.search().ratio)
    # Past MAX_LOSS_VALUES the loss is measured on every 30th value of the concatenation.
    monkeypatch.setattr(ifmr, "MAX_LOSS_VALUES", 100)
    strided = ActivationSketch(3000, config)
    for sample in samples:
        strided.add(sample)
    chosen = strided.search()
    subset = together[::30]
    assert chosen.loss == pytest.approx(float(np.mean(
        (fake_quantize(subset, chosen.scale, chosen.offset) - subset) ** 2)))


@pytest.mark.ort
def test_a_kept_layer_reads_its_float_input_weights_and_bias():
    samples = [{"x": STRETCH(cv2.imread(str(p)))[0]} for p in _photos()]
    emulation = Int8Emulation(conv_net(), samples, op_types={"Conv"})
    kept = emulation.model_keeping(["conv1"])  # conv1 has a bias: its DQ writes the name 'b1'
    onnx.checker.check_model(kept, full_check=True)
    fp32 = run_onnx(with_outputs(conv_net(), ["c1"]), samples[0])
    int8 = run_onnx(with_outputs(kept, ["c1"]), samples[0])
    np.testing.assert_array_equal(int8["c1"], fp32["c1"])  # conv1 computes in float, as FP32
    assert not np.array_equal(int8["y"], fp32["y"])  # conv2 is still INT8
    everything = run_onnx(with_outputs(emulation.model_keeping(), ["c1"]), samples[0])
    assert not np.array_equal(everything["c1"], fp32["c1"])


def residual_net(seed: int = 0) -> onnx.ModelProto:
    """conv1 -> relu -> r1; conv2(r1) + r1 -> y: r1 is read by a quantized Conv and by an Add."""
    rng = np.random.default_rng(seed)
    weights = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
               "w2": (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)}
    nodes = [node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             node("Add", ["c2", "r1"], ["y"], name="add")]
    return make_model(nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 8, 8, 8]}, weights)


@pytest.mark.ort
@pytest.mark.parametrize("build", [conv_net, residual_net])
def test_only_the_quantized_layers_read_quantized_tensors(build):
    samples = [{"x": STRETCH(cv2.imread(str(p)))[0]} for p in _photos()]
    emulation = Int8Emulation(build(), samples, op_types={"Conv"})
    graph = emulation.model_keeping().graph
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    for reader in graph.node:
        if reader.op_type not in ("Conv", "QuantizeLinear", "DequantizeLinear"):
            assert not dequantized & set(reader.input), reader.name  # the Add reads r1 itself
    # Every layer kept: the model is the FP32 model again, to the bit.
    everything = emulation.model_keeping(emulation.layers)
    for sample in samples[:2]:
        np.testing.assert_array_equal(run_onnx(everything, sample)["y"],
                                      run_onnx(build(), sample)["y"])
