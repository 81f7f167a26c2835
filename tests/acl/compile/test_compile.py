"""`edgefuse compile` / `inspect` end to end: BUILD_DIR contents, compile.sh, manifest digests,
atomicity, and the ATC subprocess through the stand-in atc."""

import hashlib
import json
import os

import numpy as np
import onnx
import pytest

from edgefuse._version import __version__
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model
from edgefuse.cli import main as cli_main
from edgefuse.cli.main import main
from edgefuse.manifest import read_manifest
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.runtime import open_session
from tests.acl.models import conv_relu, hide_atc, make_model, node, put_fake_atc_on_path
from tests.needs import optional

pytestmark = [pytest.mark.ort, pytest.mark.standin]

SOC = "Ascend310B4"


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=13), path)
    return path


def _compile(*args):
    return cli_main.main(["compile", *map(str, args)])


def _leftovers(parent, out):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{out.name}"))


def test_without_atc_writes_everything_and_says_how_to_run_it(monkeypatch, tmp_path, capsys,
                                                               model_path):
    hide_atc(monkeypatch)
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out) == 0
    stdout = capsys.readouterr().out
    assert f"bash {out / 'compile.sh'}" in stdout and "set_env.sh" in stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "compile.sh", "manifest.json", "model.onnx", "op_support.json"]
    assert (out / "compile.sh").read_text() == (
        "#!/usr/bin/env bash\n"
        f"# Compile model.onnx into model.om for {SOC} with ATC "
        f"(written by edgefuse {__version__}).\n"
        "# Run it on a host with the CANN toolkit after sourcing its set_env.sh,\n"
        "# e.g. `source /usr/local/Ascend/ascend-toolkit/set_env.sh`.\n"
        "set -euo pipefail\n"
        'cd "$(dirname "$0")"\n'
        "atc \\\n"
        "    --framework=5 \\\n"
        "    --model=model.onnx \\\n"
        "    --output=model \\\n"
        f"    --soc_version={SOC} \\\n"
        "    --input_shape=x:1,3,8,8 \\\n"
        "    --precision_mode=force_fp16 \\\n"
        "    --log=error\n"
    )
    assert os.access(out / "compile.sh", os.X_OK)
    manifest = read_manifest(out)  # also checks every digest
    on_disk = {p.name for p in out.iterdir()} - {"manifest.json"}
    assert set(manifest.files) == on_disk
    for name, digest in manifest.files.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert manifest.soc == SOC and manifest.om is None and manifest.cann_version is None
    assert [(i.name, list(i.shape), i.dtype, i.layout) for i in manifest.inputs] == [
        ("x", [1, 3, 8, 8], "float32", "NCHW")]
    assert manifest.extra["atc"]["argv"][:2] == ["atc", "--framework=5"]
    assert manifest.extra["atc"]["ran"] is False
    assert manifest.extra["prepare"]["opset"] == 11
    assert manifest.extra["prepare"]["parity"]["min_cosine"] >= 0.99999
    assert manifest.extra["precision"]["precision_mode"] == "force_fp16"
    assert _leftovers(tmp_path, out) == []


def test_require_atc_fails_before_writing_anything(monkeypatch, tmp_path, capsys, model_path):
    hide_atc(monkeypatch)
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out, "--require-atc") == 2
    assert "error[atc-not-found]" in capsys.readouterr().err
    assert not out.exists() and _leftovers(tmp_path, out) == []


def test_with_atc_the_om_and_its_log_join_the_build(monkeypatch, tmp_path, model_path):
    argv_file = tmp_path / "argv.json"
    put_fake_atc_on_path(monkeypatch, "success", argv_file)
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out, "--require-atc") == 0
    manifest = read_manifest(out)
    assert manifest.om == "model.om" and {"model.om", "atc.log"} <= set(manifest.files)
    assert (out / "model.om").read_bytes() == b"fake om for model"
    assert "ATC run success" in (out / "atc.log").read_text()
    called = json.loads(argv_file.read_text())
    assert called[1:] == manifest.extra["atc"]["argv"][1:]  # the argv compile.sh holds
    assert manifest.extra["atc"]["ran"] is True


def test_atc_failure_leaves_nothing_but_its_log(monkeypatch, tmp_path, capsys, model_path):
    put_fake_atc_on_path(monkeypatch, "EZ3003")
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out) == 2
    err = capsys.readouterr().err
    assert "error[atc-failed]: ATC failed with EZ3003 at node Conv_52 (Conv)" in err
    assert "no kernel and engine" in err and "hint:" in err and "Traceback" not in err
    kept = tmp_path / "build.atc.log"
    assert f"full log: {kept}" in err and "EZ3003" in kept.read_text()
    assert not out.exists() and _leftovers(tmp_path, out) == []


def test_atc_timeout_through_the_cli(monkeypatch, tmp_path, capsys, model_path):
    put_fake_atc_on_path(monkeypatch, "timeout")
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out, "--atc-timeout", "1") == 2
    assert "error[atc-timeout]" in capsys.readouterr().err
    assert not out.exists()


def test_unsupported_nodes_are_all_listed_and_nothing_is_written(monkeypatch, tmp_path, capsys):
    hide_atc(monkeypatch)
    model = make_model(
        [node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
         node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dequant"),
         node("Relu", ["d"], ["y"], name="relu")],
        {"x": [1, 4]}, ["y"], {"s": np.float32(0.1), "z": np.uint8(128)}, opset=13)
    path = tmp_path / "qdq.onnx"
    onnx.save(model, path)
    out = tmp_path / "build"
    assert _compile(path, "--soc", SOC, "-o", out) == 2
    err = capsys.readouterr().err
    assert "error[unsupported-ops]: 2 problem(s)" in err
    assert "quant (QuantizeLinear): [unknown-op]" in err
    assert "dequant (DequantizeLinear): [unknown-op]" in err
    assert not out.exists() and _leftovers(tmp_path, out) == []


def test_aipp_build_feeds_uint8_nhwc_frames(monkeypatch, tmp_path):
    hide_atc(monkeypatch)
    model_file = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=11, size=8), model_file)
    spec_file = tmp_path / "camera.yaml"
    spec_file.write_text("input_format: BGR888\nsource_size: [10, 12]\ncrop: [1, 2, 8, 8]\n"
                         "mean: [123.675, 116.28, 103.53]\nstd: [58.395, 57.12, 57.375]\n")
    out = tmp_path / "build"
    assert _compile(model_file, "--soc", SOC, "-o", out, "--aipp", spec_file) == 0
    manifest = read_manifest(out)
    (entry,) = manifest.inputs
    assert (entry.name, list(entry.shape), entry.dtype, entry.layout) == (
        "x", [1, 12, 10, 3], "uint8", "NHWC")
    record = manifest.preprocess
    assert (record.config, record.input, record.frame_shape) == ("aipp.cfg", "x", (12, 10, 3))
    written = json.loads((out / "manifest.json").read_text())["preprocess"]
    assert written["frame"] == {"shape": [12, 10, 3], "dtype": "uint8"}
    assert "--insert_op_conf=aipp.cfg" in (out / "compile.sh").read_text()
    spec = record.spec
    assert (out / "aipp.cfg").read_text() == spec.to_cfg(0)
    # The host path: the same frame, emulated, runs through the prepared ONNX.
    frame = np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    outputs = run_onnx(onnx.load(out / "model.onnx"), {"x": spec.emulate(frame)})
    assert outputs["y"].shape == (1, 4, 8, 8)


def test_static_aipp_with_image_size_gears_takes_its_size_from_the_gears(monkeypatch, tmp_path):
    """Issue 30 §4: CANN documents static AIPP with --dynamic_image_size when the AIPP file sets
    src_image_size_w/h to 0 and neither crops nor pads (aclpythondevg_0044)."""
    hide_atc(monkeypatch)
    model_file = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=11, size=8), model_file)
    spec_file = tmp_path / "camera.yaml"
    spec_file.write_text("input_format: RGB888\nsource_size: [8, 8]\n")
    out = tmp_path / "build"
    assert _compile(model_file, "--soc", SOC, "-o", out, "--aipp", spec_file,
                    "--dynamic-image-size", "8,8;16,24") == 0
    cfg = (out / "aipp.cfg").read_text()
    assert "src_image_size_w : 0" in cfg and "src_image_size_h : 0" in cfg
    assert "crop" not in cfg
    script = (out / "compile.sh").read_text()
    assert "--insert_op_conf=aipp.cfg" in script and "--dynamic_image_size=" in script
    record = read_manifest(out).preprocess
    assert record.frame_shape == (8, 8, 3)


@pytest.mark.parametrize(("spec", "refusal"), [
    ("input_format: RGB888\nsource_size: [10, 10]\ncrop: [1, 1, 8, 8]\n", "cannot crop"),
    ("input_format: RGB888\nsource_size: [12, 12]\n", "is not one of the image-size gears"),
])
def test_static_aipp_with_image_size_gears_refuses_crop_and_off_gear_sizes(
        monkeypatch, tmp_path, capsys, spec, refusal):
    hide_atc(monkeypatch)
    model_file = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=11, size=8), model_file)
    (tmp_path / "camera.yaml").write_text(spec)
    assert _compile(model_file, "--soc", SOC, "-o", tmp_path / "b", "--aipp",
                    tmp_path / "camera.yaml", "--dynamic-image-size", "8,8;16,24") == 2
    assert refusal in capsys.readouterr().err


def test_aipp_that_does_not_fit_the_input_is_refused(monkeypatch, tmp_path, capsys, model_path):
    hide_atc(monkeypatch)
    spec_file = tmp_path / "camera.yaml"
    spec_file.write_text("input_format: RGB888\nsource_size: [16, 16]\n")
    assert _compile(model_path, "--soc", SOC, "-o", tmp_path / "b", "--aipp", spec_file) == 2
    assert "AIPP outputs 3x16x16 but input 'x' is [1, 3, 8, 8]" in capsys.readouterr().err


def test_keep_fp32_report_becomes_keep_dtype(monkeypatch, tmp_path, model_path):
    hide_atc(monkeypatch)
    report = tmp_path / "fp16.json"
    report.write_text(json.dumps({"keep_fp32": {"nodes": ["relu"], "op_types": []}}))
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out, "--keep-fp32-from", report) == 0
    assert (out / "keep_dtype.cfg").read_text() == "relu\n"
    assert "--keep_dtype=keep_dtype.cfg" in (out / "compile.sh").read_text()
    assert read_manifest(out).extra["precision"]["keep_dtype_nodes"] == ["relu"]


def test_dynamic_batch_gears(monkeypatch, tmp_path, model_path):
    hide_atc(monkeypatch)
    out = tmp_path / "build"
    assert _compile(model_path, "--soc", SOC, "-o", out, "--dynamic-batch", "1,2,4") == 0
    script = (out / "compile.sh").read_text()
    assert "--input_shape=x:-1,3,8,8" in script and "--dynamic_batch_size=1,2,4" in script
    manifest = read_manifest(out)
    assert list(manifest.inputs[0].shape) == ["x_dim0", 3, 8, 8]
    assert manifest.extra["gears"]["dynamic_batch"] == [1, 2, 4]


def test_existing_build_dir_needs_force(monkeypatch, tmp_path, capsys, model_path):
    hide_atc(monkeypatch)
    out = tmp_path / "build"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    assert _compile(model_path, "--soc", SOC, "-o", out) == 2
    assert "already exists" in capsys.readouterr().err
    assert _compile(model_path, "--soc", SOC, "-o", out, "--force") == 0
    assert not (out / "stale.txt").exists() and (out / "manifest.json").exists()
    assert _leftovers(tmp_path, out) == []


def test_no_soc_and_no_npu_smi(monkeypatch, tmp_path, capsys, model_path):
    hide_atc(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _compile(model_path, "-o", tmp_path / "b") == 2
    err = capsys.readouterr().err
    assert "error[unknown-soc]" in err and "Ascend310B1" in err and "Ascend310B4" in err


def test_inspect_exit_codes_and_json(tmp_path, capsys, model_path):
    assert cli_main.main(["inspect", str(model_path), "--target", SOC]) == 0
    assert "supported: 0 of 2 nodes unsupported" in capsys.readouterr().out
    bad = tmp_path / "bad.onnx"
    onnx.save(conv_relu(batch="N"), bad)
    assert cli_main.main(["inspect", str(bad), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["supported"] is False
    assert data["model_findings"][0]["check"] == "dynamic-input"


@pytest.mark.torch
def test_a_torch_exported_cnn_compiles_with_parity(monkeypatch, tmp_path):
    torch = optional("torch")
    hide_atc(monkeypatch)
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Hardswish(),
        torch.nn.Upsample(scale_factor=2.0), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 5), torch.nn.Softmax(-1),
    ).eval()
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 16, 16),), str(path), opset_version=17,
                      dynamo=False, input_names=["images"], output_names=["probs"])
    out = tmp_path / "build"
    assert _compile(path, "--soc", SOC, "-o", out) == 0
    prepare = read_manifest(out).extra["prepare"]
    assert prepare["opset"] == 14  # HardSwish is registered from 14
    assert prepare["parity"]["min_cosine"] >= 0.99999
    original, prepared = onnx.load(path), onnx.load(out / "model.onnx")
    feeds = random_feeds(input_specs(original), seed=3)
    np.testing.assert_allclose(run_onnx(prepared, feeds)["probs"],
                               run_onnx(original, feeds)["probs"], rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_every_catalogue_model_compiles_with_parity(monkeypatch, tmp_path):
    """The done-criterion of compile, on the tiny variants of the model catalogue."""
    optional("torch")
    from edgefuse import models  # noqa: PLC0415 - needs torch
    from edgefuse.convert import convert  # noqa: PLC0415 - needs torch

    hide_atc(monkeypatch)
    for name in models.CATALOGUE:
        entry = models.get_entry(name)
        source = tmp_path / f"{name}.onnx"
        convert(entry.build("tiny"), inputs={"input": entry.tiny_input_shape}, output=source)
        out = tmp_path / f"{name}.build"
        assert _compile(source, "--soc", SOC, "-o", out) == 0, name
        prepare = read_manifest(out).extra["prepare"]
        assert prepare["parity"]["checked"] and prepare["parity"]["min_cosine"] >= 0.99999, name


def test_the_aipp_record_written_by_compile_is_what_every_reader_acts_on(monkeypatch, tmp_path):
    """compile writes the record; the manifest reader, the host session and `run` on an image
    file all act on it, and agree with AIPP's own emulation of the same frame."""
    cv2 = optional("cv2")
    hide_atc(monkeypatch)
    model_file = tmp_path / "net.onnx"
    onnx.save(conv_relu(opset=11, size=8), model_file)
    spec = AippSpec.from_dict({"input_format": "BGR888", "source_size": [10, 12],
                               "crop": [1, 2, 8, 8], "mean": [123.675, 116.28, 103.53],
                               "std": [58.395, 57.12, 57.375]})
    out = tmp_path / "build"
    compile_model(model_file, SOC, out, aipp=spec)
    record = read_manifest(out).preprocess
    assert (record.spec, record.input, record.related_input_rank) == (spec, "x", 0)
    assert record.model_input_shape == (1, 3, 8, 8)
    prepared = onnx.load(out / "model.onnx")
    image = np.random.default_rng(4).integers(0, 256, (30, 25, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "photo.png"), image)
    frame = spec.frame_from_bgr(image)
    assert frame.shape == record.frame_shape
    expected = run_onnx(prepared, {"x": spec.emulate(frame)})["y"]
    with open_session(out, "cpu") as session:
        assert [(s.name, s.shape, s.dtype) for s in session.inputs] == [
            ("x", (1, 12, 10, 3), np.dtype(np.uint8))]
        np.testing.assert_allclose(session.run({"x": frame[np.newaxis]})["y"], expected,
                                   rtol=1e-6, atol=1e-6)
    saved = tmp_path / "out.npz"
    assert main(["run", str(out), "--backend", "cpu", "--input", f"x={tmp_path / 'photo.png'}",
                 "--save", str(saved)]) == 0
    np.testing.assert_allclose(np.load(saved)["y"], expected, rtol=1e-6, atol=1e-6)


def test_a_build_is_readable_by_other_users(monkeypatch, tmp_path, model_path):
    """ATC often runs as root and the board's service as its own user: 0644 files in a 0755
    folder (under the usual umask), not the 0600/0700 of temporary files."""
    hide_atc(monkeypatch)
    old = os.umask(0o022)
    try:
        assert _compile(model_path, "--soc", SOC, "-o", tmp_path / "b") == 0
    finally:
        os.umask(old)
    build = tmp_path / "b"
    assert oct(build.stat().st_mode & 0o777) == "0o755"
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in build.iterdir()}
    assert modes.pop("compile.sh") == "0o755"
    assert set(modes.values()) == {"0o644"}, modes
