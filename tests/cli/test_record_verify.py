"""Goldens: `run --record` writes the inputs and outputs with where they come from, `verify
--against` replays them on another backend and gates, `--frames` feeds images as the apps do."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.compile import compile_model
from edgefuse.cli import main as cli_main
from edgefuse.errors import InputError
from edgefuse.fallback.ort_session import OrtSession
from edgefuse.goldens import check_against, record_runs
from edgefuse.model_source import resolve_source
from edgefuse.reference.recording import FORMAT, load_recording, make_recording
from edgefuse.runtime import open_session
from tests.model_builders import conv_net, save
from tests.needs import optional

pytestmark = pytest.mark.ort


@pytest.fixture
def build(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    compile_model(save(conv_net(), tmp_path / "net.onnx"), "Ascend310B4", tmp_path / "build")
    return tmp_path / "build"


def _record(args, capsys):
    code = cli_main.main(["run", *map(str, args)])
    return code, capsys.readouterr()


def test_run_record_stores_inputs_outputs_and_where_they_come_from(build, tmp_path, capsys):
    golden = tmp_path / "golden.npz"
    code, out = _record([build, "--backend", "cpu", "--seed", "3", "--record", golden], capsys)
    assert code == 0 and f"recorded {golden}: 1 sample(s) recorded on cpu" in out.out
    with np.load(golden) as data:
        assert sorted(data.files) == ["input/0/x", "meta", "output/0/features", "output/0/logits"]
    recording = load_recording(golden)
    digest = hashlib.sha256((build / "manifest.json").read_bytes()).hexdigest()
    assert recording.meta == {
        "format": FORMAT, "backend": "cpu", "soc": None,
        "build": {"path": str(build), "manifest_sha256": digest, "soc": "Ascend310B4"},
        "edgefuse_version": recording.meta["edgefuse_version"],
        "created_by": f"edgefuse run {build} --backend cpu --seed 3 --record {golden}",
        "samples": 1, "inputs": ["x"], "outputs": ["logits", "features"],
    }
    x = recording.inputs[0]["x"]
    np.testing.assert_array_equal(x, np.random.default_rng(3).standard_normal((1, 3, 8, 8))
                                  .astype(np.float32))
    with OrtSession(build / "model.onnx") as session:  # an independent run of the same input
        for name, array in session.run({"x": x}).items():
            np.testing.assert_array_equal(recording.outputs[0][name], array)


def test_a_cpu_recording_replays_on_sim_and_a_sim_recording_on_cpu(build, tmp_path, capsys):
    golden, board = tmp_path / "golden.npz", tmp_path / "board.npz"
    assert _record([build, "--backend", "cpu", "--record", golden], capsys)[0] == 0
    assert _record([build, "--backend", "sim", "--record", board], capsys)[0] == 0
    assert load_recording(board).meta["soc"] == "Ascend310B4"
    report = tmp_path / "against.json"
    code = cli_main.main(["verify", "--against", str(golden), str(build), "--backend", "sim",
                          "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[:2] == [f"against: {load_recording(golden).describe()}",
                                    "backend: sim"]
    assert "PASSED (cosine >= 0.999)" in out  # the FP16 gate: sim has the board's numerics
    assert json.loads(report.read_text())["backend"] == "sim"
    code = cli_main.main(["verify", "--against", str(board), str(build), "--backend", "cpu"])
    assert code == 0 and "PASSED (cosine >= 0.999)" in capsys.readouterr().out
    # cpu against cpu: the FP32 gate
    assert cli_main.main(["verify", "--against", str(golden), str(build), "--backend", "cpu"]) == 0
    assert "PASSED (cosine >= 0.99999)" in capsys.readouterr().out


def test_verify_against_fails_when_the_outputs_moved(build, tmp_path, capsys):
    with open_session(build, backends="cpu") as session:
        recording = record_runs(session, [{"x": np.ones((1, 3, 8, 8), np.float32)}],
                                model=build, created_by="test")
    moved = make_recording([(recording.inputs[0], {**recording.outputs[0],
                                                   "logits": -recording.outputs[0]["logits"]})],
                           recording.meta)
    moved.save(tmp_path / "moved.npz")
    code = cli_main.main(["verify", "--against", str(tmp_path / "moved.npz"), str(build),
                          "--backend", "sim"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED (cosine >= 0.999)" in out and "logits" in out


def test_several_samples_and_another_build_are_told(build, tmp_path, capsys, monkeypatch):
    samples = tmp_path / "samples"
    samples.mkdir()
    for index in range(3):
        np.savez(samples / f"{index}.npz", x=np.full((1, 3, 8, 8), index, np.float32))
    golden = tmp_path / "golden.npz"
    assert _record([build, "--backend", "cpu", "--inputs", samples, "--record", golden],
                   capsys)[0] == 0
    recording = load_recording(golden)
    assert len(recording.samples) == 3
    np.testing.assert_array_equal(recording.inputs[2]["x"], np.full((1, 3, 8, 8), 2))
    compile_model(tmp_path / "net.onnx", "Ascend310B4", tmp_path / "other",
                  precision="must_keep_origin_dtype")
    result = check_against(golden, tmp_path / "other", "sim")
    assert result.passed and result.result.samples == 3
    assert result.notes == [
        f"the recording was made on another build (manifest sha256 "
        f"{recording.build_sha256[:12]}..., this one "
        f"{hashlib.sha256((tmp_path / 'other' / 'manifest.json').read_bytes()).hexdigest()[:12]}"
        "...): differences may be the build's, not the backend's"]


@pytest.mark.parametrize("aipp", [None, "BGR888", "YUV420SP"])
def test_frames_are_prepared_as_the_apps_prepare_them(tmp_path, monkeypatch, capsys, aipp):
    cv2 = optional("cv2")
    from edgefuse.model_info import AppInfo
    from edgefuse.vision.model.adapter import app_info_of, plan_input, prepare_frame

    monkeypatch.setenv("PATH", "")
    spec = None if aipp is None else AippSpec.from_dict(
        {"input_format": aipp, "source_size": [8, 8], "scale": 1 / 255})
    build = compile_model(save(conv_net(), tmp_path / "net.onnx"), "Ascend310B4",
                          tmp_path / "build", aipp=spec).output_dir
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(2)]
    for index, image in enumerate(images):
        cv2.imwrite(str(frames / f"{index}.png"), image)
    golden = tmp_path / "golden.npz"
    assert _record([build, "--backend", "sim", "--frames", frames, "--record", golden],
                   capsys)[0] == 0
    recording = load_recording(golden)
    source = resolve_source(build)
    with open_session(build, backends="cpu") as session:
        plan = plan_input(session, app_info_of(source) or AppInfo(), source.manifest)
        for image, sample in zip(images, recording.samples, strict=True):
            np.testing.assert_array_equal(sample.inputs["x"], prepare_frame(plan, image)[0]["x"])
    shape = {None: (1, 3, 8, 8), "BGR888": (1, 8, 8, 3), "YUV420SP": (1, 12, 8)}[aipp]
    assert recording.inputs[0]["x"].shape == shape


def test_bad_recordings_and_arguments_are_user_errors(build, tmp_path, capsys):
    np.savez(tmp_path / "inputs.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    (tmp_path / "text.npz").write_text("not a zip")
    cases = [
        (["verify", "--against", str(tmp_path / "inputs.npz"), str(build)],
         "error[bad-recording]: '.*inputs.npz' is not an edgefuse recording: it has no 'meta'"),
        (["verify", "--against", str(tmp_path / "text.npz"), str(build)],
         "error[bad-recording]: .* it is not a readable .npz"),
        (["verify", "--against", str(tmp_path / "missing.npz"), str(build)],
         "error[file-not-found]: no such recording"),
        (["verify", "--against", str(tmp_path / "inputs.npz"), str(build), str(build)],
         "error[bad-argument]: --against takes one model"),
        (["verify", str(build / "model.onnx")], "error[bad-argument]: verify needs a reference "
                                                "and a candidate"),
        (["verify", str(build / "model.onnx"), str(build / "model.onnx"), "--backend", "sim"],
         "error[bad-argument]: --backend applies to --against"),
        (["run", str(build), "--frames", str(tmp_path), "--inputs", str(tmp_path / "inputs.npz")],
         "error[bad-input-argument]: --frames and --inputs/--input both give the inputs"),
        (["run", str(build), "--save", str(tmp_path / "o.npz"), "--record",
          str(tmp_path / "o.npz")], "error[bad-output-path]: the record and the save are the "
                                    "same file"),
        (["run", str(build), "--backend", "sim", "--sim-memory", "lots"],
         "error[bad-session-option]: memory must be a positive number of bytes"),
    ]
    for argv, message in cases:
        assert cli_main.main(argv) == 2, argv
        err = capsys.readouterr().err
        reference, pattern = message.split(": ", 1)
        assert err.startswith(reference) and re.search(pattern, err), (argv, err)
        assert "Traceback" not in err
    assert not (tmp_path / "o.npz").exists()


def test_a_recording_needs_a_sample():
    with pytest.raises(InputError, match="a recording needs at least one sample"):
        make_recording([], {"backend": "cpu"})
