"""quantize's options belong to one target: an --fp16 option given with --int8 (or the reverse)
is refused, not silently ignored; the usage errors say what the chosen target needs; and the
verify command printed after --int8 --emulate runs as printed, on the calibration frames."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import onnx
import pytest

from edgefuse.cli.main import main
from tests.quantize.graphs import conv_net

pytestmark = pytest.mark.ort

PHOTOS = Path(__file__).parents[1] / "vision" / "photos"


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "net.onnx"
    onnx.save(conv_net(), path)
    return path


@pytest.mark.parametrize("option", [
    ["--keep-fp32", "none"], ["--min-cosine", "0.9"], ["--seed", "0"], ["--samples", "4"],
    ["--keep-io-types"],
])
def test_an_fp16_option_with_int8_is_refused_and_nothing_written(model, tmp_path, capsys, option):
    out = tmp_path / "q"
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o", str(out),
                 *option]) == 2
    err = capsys.readouterr().err
    assert f"error[bad-usage]: {option[0]} applies to --fp16 only, not to --int8" in err, err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("option", [["--emulate"], ["--soc", "Ascend310P3"],
                                    ["--keep-fp16", "conv1"], ["--task", "detect"],
                                    ["--max-drop", "0.5"]])
def test_an_int8_option_with_fp16_is_refused_and_nothing_written(model, tmp_path, capsys, option):
    out = tmp_path / "net.fp16.onnx"
    assert main(["quantize", str(model), "--fp16", "-o", str(out), *option]) == 2
    err = capsys.readouterr().err
    assert f"error[bad-usage]: {option[0]} applies to --int8 only, not to --fp16" in err, err
    assert not out.exists()


def test_both_targets_are_named_as_both_given(model, tmp_path, capsys):
    assert main(["quantize", str(model), "--fp16", "--int8", "-o", str(tmp_path / "o")]) == 2
    assert "one of --fp16, --int8 (both were given)" in capsys.readouterr().err


def test_a_missing_output_with_int8_shows_the_int8_command(model, capsys):
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS)]) == 2
    assert "hint: edgefuse quantize IN.onnx --int8 --inputs frames/ -o FOLDER" in \
        capsys.readouterr().err


def test_the_printed_verify_command_runs_on_the_calibration_frames(tmp_path, capsys,
                                                                   monkeypatch):
    """Spaces in every path; the command is run as printed, from the same folder: it names the
    frames (on random inputs the comparison says nothing about the camera)."""
    work = tmp_path / "my work"
    shutil.copytree(PHOTOS, work / "camera frames")
    onnx.save(conv_net(), work / "my net.onnx")
    monkeypatch.chdir(work)
    assert main(["quantize", "my net.onnx", "--int8", "--inputs", "camera frames", "-o",
                 "my q", "--emulate"]) == 0
    printed = capsys.readouterr().out
    line = next(text for text in printed.splitlines() if "edgefuse verify" in text)
    argv = shlex.split(line[line.index("edgefuse verify"):])
    assert argv[argv.index("--inputs") + 1] == "camera frames"
    assert main(argv[1:]) == 0
    assert "PASSED" in capsys.readouterr().out
    compile_argv = shlex.split(printed[printed.index("edgefuse compile"):].split(")")[0])
    assert compile_argv[1:3] == ["compile", "my net.onnx"] and compile_argv[-1] == "my q"


def test_fewer_frames_than_cann_advises_are_noted(model, tmp_path, capsys):
    """CANN advises 16 or 32 calibration images: fewer still calibrate, with a note that says so;
    16 give no note."""
    photos = sorted(PHOTOS.glob("*.jpg"))
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o",
                 str(tmp_path / "few")]) == 0
    assert f"note: {len(photos)} calibration sample(s); CANN advises 16 or 32 images" in \
        capsys.readouterr().out
    enough = tmp_path / "enough"
    enough.mkdir()
    for index in range(16):
        shutil.copy(photos[index % len(photos)], enough / f"{index:02d}.jpg")
    assert main(["quantize", str(model), "--int8", "--inputs", str(enough), "-o",
                 str(tmp_path / "q16")]) == 0
    printed = capsys.readouterr().out
    assert "16 sample(s)" in printed and "note:" not in printed


def test_help_shows_the_emulation_verified_on_the_frames(capsys):
    with pytest.raises(SystemExit):
        main(["quantize", "--help"])
    assert "verify net.onnx net.int8/host_int8.qdq.onnx --inputs frames/" in capsys.readouterr().out
