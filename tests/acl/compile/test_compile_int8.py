"""compile --int8: the calibration folder of quantize --int8 becomes ATC's
--compression_optimize_conf in a self-contained build, checked by the strict stand-in atc."""

import json
import os
import subprocess
from pathlib import Path

import onnx
import pytest

from edgefuse.acl.atc.options import AtcOptions
from edgefuse.acl.compile.compile import compile_model
from edgefuse.cli import main as cli_main
from edgefuse.errors import InputError
from edgefuse.fallback.sim_session import SimSession
from edgefuse.manifest import read_manifest
from edgefuse.preprocess import Preprocess
from edgefuse.quantize.int8 import read_int8_calibration, write_int8_calibration
from tests.acl.models import FAKES, conv_relu, hide_atc, put_fake_atc_on_path

pytestmark = [pytest.mark.ort, pytest.mark.standin]

SOC = "Ascend310B4"
PHOTOS = Path(__file__).parents[2] / "vision" / "photos"
STRETCH = Preprocess(size=(8, 8), resize="stretch", layout="NCHW", scale=1 / 255)
AIPP = ("input_format: BGR888\nsource_size: [8, 8]\n"
        "mean: [123.675, 116.28, 103.53]\nstd: [58.395, 57.12, 57.375]\n")


@pytest.fixture
def model_and_folder(tmp_path):
    model = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=13), model)
    folder = tmp_path / "net.int8"
    write_int8_calibration(model, folder, inputs=PHOTOS, preprocess=STRETCH, keep_fp16=["conv"])
    return model, folder


def _compile(*args):
    return cli_main.main(["compile", *map(str, args)])


def test_the_build_carries_the_calibration_and_the_stand_in_atc_accepts_it(
        monkeypatch, tmp_path, model_and_folder):
    model, folder = model_and_folder
    argv_file = tmp_path / "argv.json"
    put_fake_atc_on_path(monkeypatch, argv_file=argv_file)
    out = tmp_path / "build"
    assert _compile(model, "--soc", SOC, "-o", out, "--int8", folder) == 0
    argv = json.loads(argv_file.read_text())
    assert "--compression_optimize_conf=compression_optimize.cfg" in argv
    assert "--enable_small_channel=1" not in argv  # no AIPP: nothing to fuse
    samples = len(list(PHOTOS.glob("*.jpg")))
    assert (out / "compression_optimize.cfg").read_text() == (
        "calibration:\n{\n    input_data_dir: ./int8/input0.bin\n"
        f"    input_shape: x:{samples},3,8,8\n    config_file: ./int8/simple_config.cfg\n"
        f"    infer_soc: {SOC}\n    log: info\n}}\n")
    assert (out / "int8" / "input0.bin").read_bytes() == (folder / "input0.bin").read_bytes()
    manifest = read_manifest(out)
    assert manifest.extra["int8"]["keep_fp16"] == ["conv"]
    assert "int8/input0.bin" in manifest.files
    # compile.sh, run by hand from the build, passes the stand-in's checks too.
    env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", str(out / "compile.sh")], env=env, capture_output=True,
                         text=True, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_sim_says_an_int8_build_runs_its_fp16_numerics(monkeypatch, tmp_path, model_and_folder,
                                                     caplog):
    """sim has no INT8 kernels: running an INT8 build silently as FP16 would pass off FP16
    figures as the board's."""
    model, folder = model_and_folder
    put_fake_atc_on_path(monkeypatch)
    out = tmp_path / "build"
    assert _compile(model, "--soc", SOC, "-o", out, "--int8", folder) == 0
    with caplog.at_level("WARNING", logger="edgefuse.fallback.sim_session"), \
            SimSession(out, soc=SOC) as session:
        assert "runs its FP16 numerics" in session.numerics.note
        assert not session.numerics.exact
    assert "host_int8.qdq.onnx" in caplog.text


def test_aipp_into_a_small_channel_conv_turns_on_first_layer_quantization(
        monkeypatch, tmp_path, model_and_folder):
    model, folder = model_and_folder
    argv_file = tmp_path / "argv.json"
    put_fake_atc_on_path(monkeypatch, argv_file=argv_file)
    spec = tmp_path / "camera.yaml"
    spec.write_text(AIPP)
    out = tmp_path / "build"
    assert _compile(model, "--soc", SOC, "-o", out, "--int8", folder, "--aipp", spec) == 0
    assert "--enable_small_channel=1" in json.loads(argv_file.read_text())
    assert (out / "compression_optimize.cfg").read_text().startswith(
        "enable_first_layer_quantization: true\ncalibration:\n")


@pytest.mark.parametrize("mode", ["force_fp32", "must_keep_origin_dtype"])
def test_high_precision_modes_are_refused_with_int8(monkeypatch, tmp_path, capsys,
                                                    model_and_folder, mode):
    model, folder = model_and_folder
    hide_atc(monkeypatch)
    assert _compile(model, "--soc", SOC, "-o", tmp_path / "b", "--int8", folder,
                    "--precision", mode) == 2
    assert f"cannot be combined with --precision_mode={mode}" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    with pytest.raises(InputError, match="INT8 calibration cannot be combined"):
        AtcOptions(model="m.onnx", output="m", soc_version=SOC, input_shape={"x": [1, 3]},
                   precision_mode=mode, compression_optimize_conf="c.cfg")


def test_a_folder_for_another_model_is_refused(monkeypatch, tmp_path, model_and_folder):
    _, folder = model_and_folder
    hide_atc(monkeypatch)
    other = tmp_path / "other.onnx"
    onnx.save(conv_relu(opset=13, size=16), other)
    with pytest.raises(InputError, match=r"is \[\d+, 3, 8, 8\], the model's input is "
                                         r"\[1, 3, 16, 16\]"):
        _compile_api(other, tmp_path / "b", folder)


def test_a_folder_for_another_soc_is_refused(monkeypatch, tmp_path):
    hide_atc(monkeypatch)
    model = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=13), model)
    folder = tmp_path / "q"
    write_int8_calibration(model, folder, inputs=PHOTOS, preprocess=STRETCH,
                           infer_soc="Ascend310P3")
    with pytest.raises(InputError, match="made for Ascend310P3, the build is for Ascend310B4"):
        _compile_api(model, tmp_path / "b", folder)


def test_the_stand_in_atc_refuses_a_bin_of_the_wrong_size(monkeypatch, tmp_path,
                                                          model_and_folder, capsys):
    model, folder = model_and_folder
    hide_atc(monkeypatch)
    out = tmp_path / "build"
    assert _compile(model, "--soc", SOC, "-o", out, "--int8", folder) == 0
    data = (out / "int8" / "input0.bin").read_bytes()
    (out / "int8" / "input0.bin").write_bytes(data[:-4])
    env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", str(out / "compile.sh")], env=env, capture_output=True,
                         text=True, check=False)
    assert ran.returncode == 1
    assert "calibration file [./int8/input0.bin] is not float32" in ran.stdout


def _compile_api(model, out, folder):
    return compile_model(model, SOC, out, int8=read_int8_calibration(folder))


def test_a_kept_layer_missing_from_the_compiled_model_is_refused(monkeypatch, tmp_path,
                                                                  model_and_folder):
    _, folder = model_and_folder
    hide_atc(monkeypatch)
    renamed = conv_relu(opset=13)
    renamed.graph.node[0].name = "stem"
    other = tmp_path / "renamed.onnx"
    onnx.save(renamed, other)
    with pytest.raises(InputError, match="not quantizable layers of the prepared model: conv"):
        _compile_api(other, tmp_path / "b", folder)
    assert not (tmp_path / "b").exists()
