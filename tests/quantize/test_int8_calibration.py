"""quantize --int8: the calibration folder ATC's --compression_optimize_conf reads, written from
real photos through the model's preprocessing, and every refusal."""

import json
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest

from edgefuse.cli.main import main
from edgefuse.errors import InputError
from edgefuse.preprocess import Preprocess
from edgefuse.quantize.int8 import read_int8_calibration, write_int8_calibration
from edgefuse.verify.layers import compare_layers
from tests.quantize.graphs import conv_net, make_model, node

pytestmark = pytest.mark.ort

PHOTOS = Path(__file__).parents[1] / "vision" / "photos"
STRETCH = Preprocess(size=(8, 8), resize="stretch", layout="NCHW", scale=1 / 255)


def _photos() -> list[Path]:
    return sorted(p for p in PHOTOS.iterdir() if p.suffix == ".jpg")


def test_bins_hold_the_photos_through_the_preprocessing_stacked_on_the_batch_axis(tmp_path):
    out = tmp_path / "net.int8"
    written = write_int8_calibration(conv_net(), out, inputs=PHOTOS, preprocess=STRETCH,
                                     keep_fp16=["conv1"])
    photos = _photos()
    # The reference: each photo decoded by OpenCV and run through the same record, in name order.
    expected = np.concatenate([STRETCH(cv2.imread(str(p)))[0] for p in photos], axis=0)
    assert expected.shape == (len(photos), 3, 8, 8)
    data = np.fromfile(out / "input0.bin", dtype=np.float32)
    np.testing.assert_array_equal(data.reshape(expected.shape), expected)
    assert written.samples == len(photos)
    assert (out / "compression_optimize.cfg").read_text() == (
        "calibration:\n{\n"
        "    input_data_dir: ./input0.bin\n"
        f"    input_shape: x:{len(photos)},3,8,8\n"
        "    config_file: ./simple_config.cfg\n"
        "    infer_soc: Ascend310B4\n"
        "    log: info\n}\n")
    simple = (out / "simple_config.cfg").read_text()
    assert 'skip_layers: "conv1"' in simple and "channel_wise: true" in simple
    assert "activation_offset: true" in simple
    record = read_int8_calibration(out)
    assert record.keep_fp16 == ("conv1",) and record.inputs[0].shape == (len(photos), 3, 8, 8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.int8"]  # no staging left


def test_cli_writes_the_folder_and_says_how_to_compile_it(tmp_path, capsys):
    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    code = main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o",
                 str(tmp_path / "q"), "--keep-fp16", "conv2"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "kept FP16: conv2" in printed and "--int8" in printed
    assert json.loads((tmp_path / "q" / "int8.json").read_text())["keep_fp16"] == ["conv2"]


def test_no_inputs_is_refused_naming_noise(tmp_path):
    with pytest.raises(InputError, match="random noise") as info:
        write_int8_calibration(conv_net(), tmp_path / "q", inputs=None)
    assert info.value.reference == "int8-needs-real-inputs"
    assert not (tmp_path / "q").exists()


def test_unknown_layer_is_refused_with_a_suggestion(tmp_path):
    with pytest.raises(InputError, match="no quantizable layer named 'conv3'.*conv1|conv2"):
        write_int8_calibration(conv_net(), tmp_path / "q", inputs=PHOTOS, preprocess=STRETCH,
                               keep_fp16=["conv3"])
    assert not (tmp_path / "q").exists()


def test_a_name_like_no_layer_is_refused_listing_the_first_layers(tmp_path):
    """An exporter's name that matches nothing here (an Ultralytics path on another graph):
    the hint shows what the names look like."""
    with pytest.raises(InputError, match=r"2 quantizable layers begin conv1, conv2") as info:
        write_int8_calibration(conv_net(), tmp_path / "q", inputs=PHOTOS, preprocess=STRETCH,
                               keep_fp16=["/model.22/cv2.0/cv2.0.2/Conv"])
    assert "optimized model" in info.value.hint
    assert not (tmp_path / "q").exists()


def test_a_layer_int8_does_not_quantize_is_refused(tmp_path):
    with pytest.raises(InputError, match="'relu1' is a Relu node"):
        write_int8_calibration(conv_net(), tmp_path / "q", inputs=PHOTOS, preprocess=STRETCH,
                               keep_fp16=["relu1"])


def test_samples_of_the_wrong_shape_are_refused(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.zeros((1, 3, 16, 16), np.float32))
    with pytest.raises(InputError, match="x"):
        write_int8_calibration(conv_net(), tmp_path / "q", inputs=tmp_path / "s.npz")
    assert not (tmp_path / "q").exists()


def test_an_input_name_that_breaks_input_shape_is_refused(tmp_path):
    model = make_model([node("Relu", ["in:0"], ["y"], name="r")], {"in:0": [1, 3]},
                       {"y": [1, 3]})
    with pytest.raises(InputError, match="separator"):
        write_int8_calibration(model, tmp_path / "q", inputs={"in:0": np.ones((1, 3), "f4")})


def test_an_existing_folder_is_refused_untouched(tmp_path):
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "mine").write_text("keep")
    with pytest.raises(InputError, match="already exists"):
        write_int8_calibration(conv_net(), tmp_path / "q", inputs=PHOTOS, preprocess=STRETCH)
    assert (tmp_path / "q" / "mine").read_text() == "keep"


def test_a_truncated_bin_is_refused_on_read(tmp_path):
    out = tmp_path / "q"
    write_int8_calibration(conv_net(), out, inputs=PHOTOS, preprocess=STRETCH)
    data = (out / "input0.bin").read_bytes()
    (out / "input0.bin").write_bytes(data[:-4])
    with pytest.raises(InputError, match="input0.bin.*not"):
        read_int8_calibration(out)


def test_cli_refuses_both_or_no_precision(tmp_path, capsys):
    assert main(["quantize", "m.onnx", "-o", str(tmp_path / "o"), "--int8", "--fp16"]) == 2
    assert "choose the target precision: one of --fp16, --int8" in capsys.readouterr().err


def _initializer(model, name):
    return next(onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name)


def _dequantize_of(model, weight_name):
    """(int8 values, scale, zero point) of the DequantizeLinear that restores ``weight_name``."""
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0].startswith(weight_name):
            return [_initializer(model, i) for i in n.input]
    raise AssertionError(f"no DequantizeLinear for {weight_name}")


def test_the_host_emulation_quantizes_as_the_simple_config_asks(tmp_path):
    out = tmp_path / "q"
    written = write_int8_calibration(conv_net(), out, inputs=PHOTOS, preprocess=STRETCH,
                                     keep_fp16=["conv2"], emulate=True)
    assert written.emulated == "host_int8.qdq.onnx"
    emulated = onnx.load(out / written.emulated)
    # Weights: INT8, symmetric (zero point 0), one scale per output channel = max|w_c| / 127.
    weights = _initializer(conv_net(), "w1")
    values, scale, zero = _dequantize_of(emulated, "w1")
    np.testing.assert_allclose(scale, np.abs(weights).reshape(8, -1).max(axis=1) / 127,
                               rtol=1e-6)
    assert values.dtype == np.int8 and not zero.any()
    # The kept layer reads its weights as they are: no DequantizeLinear restores w2.
    with pytest.raises(AssertionError, match="no DequantizeLinear for w2"):
        _dequantize_of(emulated, "w2")
    # Activations: per tensor with an offset (uint8), from the calibration data's range.
    calibration = np.fromfile(out / "input0.bin", np.float32)
    x_scale = next(_initializer(emulated, n.input[1]) for n in emulated.graph.node
                   if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    assert x_scale.shape == () and x_scale == pytest.approx(
        (calibration.max() - min(calibration.min(), 0)) / 255, rel=1e-6)
    assert json.loads((out / "int8.json").read_text())["host_emulation"]["model"] == \
        "host_int8.qdq.onnx"


def test_verify_per_layer_shows_each_layers_int8_error(tmp_path):
    out = tmp_path / "q"
    write_int8_calibration(conv_net(), out, inputs=PHOTOS, preprocess=STRETCH, emulate=True)
    sample = STRETCH(cv2.imread(str(_photos()[0])))[0]
    layers = compare_layers(conv_net(), onnx.load(out / "host_int8.qdq.onnx"), {"x": sample})
    by_tensor = {row.tensor: row for row in layers.rows}
    first = by_tensor["c1"].accumulated
    assert 0.99 < first.cosine < 1.0 and first.max_abs_error > 0  # rounded, and close


def test_cli_refuses_fp16_only_options_with_int8(tmp_path, capsys):
    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o",
                 str(tmp_path / "q"), "--report", str(tmp_path / "r.json")]) == 2
    assert "--report applies to --fp16 only" in capsys.readouterr().err
    assert not (tmp_path / "q").exists() and not (tmp_path / "r.json").exists()


def test_a_video_calibrates_on_frames_spread_over_it(tmp_path):
    video = tmp_path / "street.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10, (64, 48))
    photos = [cv2.resize(cv2.imread(str(p)), (64, 48)) for p in _photos()]
    for index in range(40):
        writer.write(photos[index % len(photos)])
    writer.release()
    written = write_int8_calibration(conv_net(), tmp_path / "q", inputs=video,
                                     preprocess=STRETCH)
    assert written.samples == 16  # VIDEO_FRAMES, spread over the 40 frames
    data = np.fromfile(tmp_path / "q" / "input0.bin", np.float32).reshape(16, 3, 8, 8)
    assert 0.0 <= data.min() and data.max() <= 1.0 and data.std() > 0.05  # real frames, 0..1


def _conv_32() -> onnx.ModelProto:
    weights = {"w": (np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * 0.3)
               .astype(np.float32)}
    return make_model([node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                      {"x": [1, 3, 32, 32]}, {"y": [1, 4, 32, 32]}, weights)


def test_inputs_that_are_only_noise_are_refused_and_photos_pass(tmp_path):
    noise = tmp_path / "noise"
    noise.mkdir()
    rng = np.random.default_rng(0)
    for index in range(3):
        np.savez(noise / f"{index}.npz", x=rng.random((1, 3, 32, 32), np.float32))
    with pytest.raises(InputError, match="look like noise") as info:
        write_int8_calibration(_conv_32(), tmp_path / "q", inputs=noise)
    assert info.value.reference == "int8-needs-real-inputs"
    assert not (tmp_path / "q").exists()
    photos = Preprocess(size=(32, 32), resize="stretch", layout="NCHW", scale=1 / 255)
    written = write_int8_calibration(_conv_32(), tmp_path / "q", inputs=PHOTOS,
                                     preprocess=photos)
    assert written.samples == len(_photos())
