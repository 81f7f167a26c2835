"""An INT8 model's bundle golden is recorded on a real frame of its calibration, so that the
board's INT8 (here: the host's emulation of it standing in for the board) is judged with
``int8_min_cosine`` on what it was calibrated for, not on noise.

References: the first photo through the spec's preprocessing computed by hand with OpenCV; the
golden a build without INT8 records (seeded random, unchanged); an AIPP build's golden input is
the uint8 frame ``edgefuse run --frames`` feeds the same build.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from edgefuse.bundle.bundle_check import verify_bundle
from edgefuse.bundle.golden import check_golden, record_golden
from edgefuse.bundle.stages import BUILD_FOLDER
from edgefuse.cli.main import main
from edgefuse.reference.recording import load_recording
from tests.acl.models import put_fake_atc_on_path
from tests.bundle.int8_specs import PHOTOS, build_one, spec_folder
from tests.quantize.test_int8_mixed import sensitive_net

pytestmark = pytest.mark.ort

MODELS = """\
  - name: net
    source: net.onnx
    task: classify
    preprocess: {{size: [8, 8], resize: stretch, color: RGB, scale: 0.00392156862745098}}
{extra}    precision: {precision}
    verify: {{samples: 1}}
"""
INT8 = "{mode: int8, calibration: frames/}"


def _spec(folder: Path, precision: str = INT8, extra: str = "") -> Path:
    return spec_folder(folder, MODELS.format(precision=precision, extra=extra),
                       sensitive_net(), "net.onnx")


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    return root, build_one(_spec(root / "spec"), root / "cache")


def test_the_golden_input_is_the_first_calibration_frame_as_preprocessed(int8_model):
    _, built = int8_model
    recording = load_recording(built.entries["golden"].path("golden.npz"))
    [sample] = [s.inputs for s in recording.samples]
    first = sorted(PHOTOS.glob("*.jpg"))[0]
    rgb = cv2.cvtColor(cv2.imread(str(first)), cv2.COLOR_BGR2RGB)
    expected = cv2.resize(rgb, (8, 8), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
    np.testing.assert_allclose(sample["x"][0], expected / np.float32(255), atol=1e-3)
    assert "the first frame of frames/ (the INT8 calibration frames)" in \
        recording.meta["golden_inputs"]
    assert "seed" not in recording.meta and built.entries["golden"].info["inputs"] == \
        recording.meta["golden_inputs"]


def test_the_board_stand_in_passes_on_the_frame_and_not_surely_on_noise(int8_model, tmp_path):
    """The host emulation of INT8 replays the golden as a board would: on the real frame it
    agrees to rounding; on goldens of seeded noise (what every build recorded before) its error
    is a hundred times larger and int8_min_cosine passes or fails by the seed."""
    _, built = int8_model
    build_dir = built.entries["compile"].path(BUILD_FOLDER)
    emulated = built.entries["int8"].path("int8/host_int8.qdq.onnx")
    real = check_golden(build_dir, built.entries["golden"].path("golden.npz"), ("cpu",), 0.99,
                        host_onnx=emulated)
    [agreement] = real.outputs
    assert real.passed and real.recorded_on == "sim"
    assert agreement.cosine > 0.9999 and agreement.rel_l2_error < 0.01
    noise = []
    for seed in range(5):
        record_golden(build_dir, tmp_path / f"noise{seed}.npz", "sim", seed=seed)
        noise.append(check_golden(build_dir, tmp_path / f"noise{seed}.npz", ("cpu",), 0.99,
                                  host_onnx=emulated))
    assert all(check.outputs[0].rel_l2_error > 50 * agreement.rel_l2_error for check in noise)
    assert not all(check.passed for check in noise)


def test_a_changed_calibration_frame_records_the_golden_again(tmp_path):
    spec = _spec(tmp_path / "spec")
    assert not build_one(spec, tmp_path / "cache").cached["golden"]
    first = sorted((tmp_path / "spec" / "frames").glob("*.jpg"))[0]
    cv2.imwrite(str(first), cv2.flip(cv2.imread(str(first)), 0))
    assert not build_one(spec, tmp_path / "cache").cached["golden"]


def test_a_float_build_keeps_its_seeded_golden(tmp_path):
    built = build_one(_spec(tmp_path / "spec", "{mode: force_fp16}"), tmp_path / "cache")
    recording = load_recording(built.entries["golden"].path("golden.npz"))
    assert recording.meta["seed"] == 0 and "golden_inputs" not in recording.meta
    assert built.entries["golden"].info["inputs"] == "seeded random (seed 0)"


def test_an_aipp_build_records_the_frame_its_aipp_takes(tmp_path):
    """The golden's input is the uint8 frame, as `edgefuse run --frames` feeds the build."""
    spec = _spec(tmp_path / "spec", extra="    aipp: {input_format: RGB888, "
                 "source_size: [8, 8], mean: [0, 0, 0], std: [255, 255, 255]}\n")
    built = build_one(spec, tmp_path / "cache")
    [sample] = [s.inputs for s in
                load_recording(built.entries["golden"].path("golden.npz")).samples]
    build_dir = built.entries["compile"].path(BUILD_FOLDER)
    first = sorted((tmp_path / "spec" / "frames").glob("*.jpg"))[0]
    assert main(["run", str(build_dir), "--backend", "cpu", "--frames", str(first),
                 "--record", str(tmp_path / "run.npz")]) == 0
    [expected] = [s.inputs for s in load_recording(tmp_path / "run.npz").samples]
    assert sample.keys() == expected.keys()
    for name in sample:
        assert sample[name].dtype == np.uint8
        np.testing.assert_array_equal(sample[name], expected[name])


def test_bundle_verify_reports_the_golden_inputs_in_the_manifest(tmp_path, monkeypatch):
    put_fake_atc_on_path(monkeypatch)
    out = tmp_path / "out"
    assert main(["build", str(_spec(tmp_path / "spec")), "-o", str(out), "--cache",
                 str(tmp_path / "cache"), "--no-progress"]) == 0
    bundle = next(p for p in out.iterdir() if p.is_dir() and p.name.startswith("quant-"))
    metadata = json.loads((bundle / "models/net/metadata.json").read_text())
    assert metadata["golden"]["inputs"].startswith("the first frame of frames/")
    report = verify_bundle(bundle, backends=("cpu",))
    assert report.models["net"].min_cosine == 0.99 and report.models["net"].passed
