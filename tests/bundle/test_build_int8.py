"""``precision: {mode: int8}`` in a build spec: the build calibrates on the spec's frames and hands
ATC the compression config exactly as ``quantize --int8`` + ``compile --int8`` do (the reference:
the CLI run on the same model and photos, through the ATC stand-in tests/fakes/atc, which checks
the config as CANN documents it); the cache key covers the frames and the INT8 settings; a wrong
spec is refused at its line and field, before or during the build, with exit 2 and no traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest

from edgefuse.bundle.builder import build
from edgefuse.bundle.cache import Cache
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_problems import SpecError
from edgefuse.bundle.stages import BuildGateError, build_model
from edgefuse.cli.main import main
from tests.acl.models import put_fake_atc_on_path
from tests.bundle.int8_specs import PHOTOS, spec_folder
from tests.bundle.models import box_head, pixel_head

pytestmark = pytest.mark.ort

SIZE = 32  # the model's input: large enough for the noise check (>= 32 px)
MODELS = """\
  - name: seg
    source: seg.onnx
    precision:
{precision}
    verify: {{samples: 1{verify}}}
"""
INT8 = "      mode: int8\n      calibration: frames/\n      keep_fp16: [c2]"


def _spec(folder: Path, precision: str = INT8, verify: str = "",
          frames: list[Path] | None = None) -> Path:
    """A one-model spec in ``folder``: ``pixel_head`` at 32x32, the photos as ``frames/``."""
    return spec_folder(folder, MODELS.format(precision=precision, verify=verify),
                       pixel_head(size=SIZE), "seg.onnx", frames)


@pytest.fixture(scope="module")
def int8_build(tmp_path_factory):
    """The spec built once with the ATC stand-in on PATH, its argv kept."""
    root = tmp_path_factory.mktemp("int8")
    argv = root / "argv.json"
    with pytest.MonkeyPatch.context() as patch:
        put_fake_atc_on_path(patch, argv_file=argv)
        outcome = build(_spec(root / "spec"), root / "out", cache_dir=root / "cache",
                        progress=False)
    return root, outcome, json.loads(argv.read_text())


def test_the_build_hands_atc_the_calibration_as_compile_int8_does(int8_build, tmp_path,
                                                                  monkeypatch):
    root, outcome, argv = int8_build
    assert "--compression_optimize_conf=compression_optimize.cfg" in argv
    assert "--precision_mode=force_fp16" in argv  # the float layers' mode, never force_fp32
    # The reference: the same model and photos through the CLI, compiled with the stand-in.
    model = root / "spec" / "seg.onnx"
    assert main(["quantize", str(model), "--int8", "--inputs", str(PHOTOS), "-o",
                 str(tmp_path / "q"), "--keep-fp16", "c2"]) == 0
    cli_argv = tmp_path / "argv.json"
    put_fake_atc_on_path(monkeypatch, argv_file=cli_argv)
    assert main(["compile", str(model), "--soc", "Ascend310B4", "-o", str(tmp_path / "b"),
                 "--int8", str(tmp_path / "q")]) == 0
    assert sorted(json.loads(cli_argv.read_text())[1:]) == sorted(argv[1:])
    folder = outcome.bundle_dir / "models" / "seg"
    for name in ("compression_optimize.cfg", "int8/input0.bin", "int8/simple_config.cfg"):
        assert (folder / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (folder / "model.om").is_file()  # the stand-in accepted the config, wrote the OM


def test_the_bins_hold_the_spec_frames_through_the_models_preprocessing(int8_build):
    _, outcome, _ = int8_build
    folder = outcome.bundle_dir / "models" / "seg"
    photos = sorted(PHOTOS.glob("*.jpg"))
    data = np.fromfile(folder / "int8" / "input0.bin", np.float32)
    assert data.size == len(photos) * 3 * SIZE * SIZE
    # the default image preprocessing: RGB, stretched to the input, scaled to 0..1
    first = cv2.resize(cv2.cvtColor(cv2.imread(str(photos[0])), cv2.COLOR_BGR2RGB),
                       (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_allclose(data.reshape(len(photos), 3, SIZE, SIZE)[0],
                               first.transpose(2, 0, 1) / np.float32(255), atol=1e-6)
    config = (folder / "compression_optimize.cfg").read_text()
    assert f"input_shape: images:{len(photos)},3,{SIZE},{SIZE}" in config
    assert 'skip_layers: "c2"' in (folder / "int8" / "simple_config.cfg").read_text()


def test_the_manifest_records_the_int8_settings_and_the_host_prediction(int8_build):
    root, outcome, _ = int8_build
    record = json.loads((outcome.bundle_dir / "MANIFEST.json").read_text())["models"]["seg"]
    int8 = record["int8"]
    assert (int8["calibration"], int8["keep_fp16"]) == ("frames/", ["c2"])
    assert int8["samples"] == len(list(PHOTOS.glob("*.jpg")))
    assert "prediction until a board confirms it" in int8["host_emulation"]["note"]
    assert int8["host_emulation"]["parity"]["outputs"][0]["cosine"] >= 0.99
    assert record["gates"]["int8_min_cosine"] == 0.99
    build_manifest = json.loads((outcome.bundle_dir / "models/seg/manifest.json").read_text())
    assert build_manifest["int8"]["calibration"] == "int8/"
    assert str(root) not in (outcome.bundle_dir / "MANIFEST.json").read_text()


def test_a_changed_calibration_image_or_int8_setting_compiles_again(tmp_path):
    spec_path = _spec(tmp_path / "spec")
    cache = Cache(tmp_path / "cache")

    def cached(path=spec_path):
        return build_model(load_spec(path).models[0], "Ascend310B4", cache,
                           lambda *event: None).cached

    assert not cached()["int8"]
    assert all(cached().values())  # nothing changed: everything from the cache
    frame = next((tmp_path / "spec" / "frames").iterdir())
    image = cv2.imread(str(frame))
    cv2.imwrite(str(frame), cv2.flip(image, 1))
    again = cached()
    assert not again["int8"] and not again["compile"] and not again["golden"]
    assert again["convert"] and again["optimize"] and again["fp16"]
    spec_path.write_text(spec_path.read_text().replace("keep_fp16: [c2]", "keep_fp16: [c1]"))
    assert not cached()["int8"]


def test_a_model_ending_in_the_yolo_head_is_judged_on_its_raw_predictions(tmp_path):
    """Final detections are not what a cosine compares (all zero where nothing is found): the
    gate sees the raw YOLO output, as the optimize gate does; ATC still gets the head."""
    spec = _spec(tmp_path / "spec", INT8.replace("\n      keep_fp16: [c2]", ""))
    onnx.save(box_head(size=SIZE), tmp_path / "spec" / "seg.onnx")
    spec.write_text(spec.read_text().replace(
        "    precision:\n", "    optimize: {yolo_head: {layout: yolov8}}\n    precision:\n"))
    built = build_model(load_spec(spec).models[0], "Ascend310B4", Cache(tmp_path / "cache"),
                        lambda *event: None)
    [judged] = built.entries["int8"].info["parity"]["outputs"]
    assert judged["name"] == "output0" and judged["shape"] == [1, 6, (SIZE // 8) ** 2]
    assert 0.99 <= judged["cosine"] < 1
    compiled = onnx.load(built.entries["compile"].path("build/model.onnx"))
    assert "YoloHead" in {node.op_type for node in compiled.graph.node}


def test_the_int8_gate_fails_the_build_naming_the_model(tmp_path):
    spec = _spec(tmp_path / "spec", verify=", int8_min_cosine: 1.0")
    with pytest.raises(BuildGateError, match=r"model 'seg' failed the int8 gate \(the host "
                                             r"emulation of the board's INT8 against FP32"):
        build_model(load_spec(spec).models[0], "Ascend310B4", Cache(tmp_path / "cache"),
                    lambda *event: None)


@pytest.mark.parametrize(("precision", "verify", "field", "message"), [
    ("      mode: int8", "", "precision.mode", r"INT8 needs real frames to calibrate on"),
    ("      mode: int8\n      calibration: missing/", "", "precision.calibration",
     r"'missing/' does not exist"),
    ("      mode: int8\n      calibration: seg.onnx", "", "precision.calibration",
     r"is a '.onnx' file, neither a video"),
    ("      mode: force_fp32\n      calibration: frames/", "", "precision.calibration",
     r"cannot be combined with precision mode 'force_fp32'"),
    ("      mode: must_keep_origin_dtype\n      keep_fp16: [c1]", "", "precision.keep_fp16",
     r"cannot be combined with precision mode 'must_keep_origin_dtype'"),
    ("      keep_fp16: [c1]", "", "precision.keep_fp16",
     r"'keep_fp16' applies to `mode: int8`; with mode 'force_fp16' it would be ignored"),
    ("      mode: force_fp16", ", int8_min_cosine: 0.9", "verify.int8_min_cosine",
     r"'int8_min_cosine' applies to `mode: int8`"),
])
def test_a_wrong_int8_spec_names_its_line_and_field(tmp_path, precision, verify, field,
                                                    message):
    spec = _spec(tmp_path / "spec", precision, verify)
    with pytest.raises(SpecError, match=r"1 problem") as caught:
        load_spec(spec)
    [problem] = caught.value.problems
    assert re.search(message, problem.message), problem.message
    assert problem.render(str(spec)).startswith(f"{spec}:{problem.position.line}:")
    assert f": models[0].{field}: " in problem.render(str(spec))


def test_an_empty_frames_folder_is_refused(tmp_path):
    spec = _spec(tmp_path / "spec", frames=[])
    with pytest.raises(SpecError, match=r"is a folder without images or \.npz files"):
        load_spec(spec)


def test_verify_calibration_serves_int8_when_precision_names_none(tmp_path):
    spec = _spec(tmp_path / "spec", "      mode: int8", ", calibration: frames/")
    int8 = load_spec(spec).models[0].int8
    assert int8.calibration == (tmp_path / "spec" / "frames").resolve()
    assert int8.calibration_at[1] == ("models", 0, "verify", "calibration")


def _noise(folder: Path) -> list[Path]:
    folder.mkdir()
    rng = np.random.default_rng(0)
    paths = []
    for index in range(4):
        path = folder / f"noise{index}.png"
        cv2.imwrite(str(path), rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8))
        paths.append(path)
    return paths


@pytest.mark.parametrize(("case", "field", "message"), [
    ("noise", "precision.calibration", r"the calibration inputs of 'images' from 'frames/' "
                                       r"look like noise"),
    ("layer", "precision.keep_fp16", r"the model has no quantizable layer named 'c3'"),
])
def test_what_only_the_build_finds_is_reported_at_the_specs_line(tmp_path, capsys, case, field,
                                                                 message):
    """Frames that are noise, a layer the model lacks: exit 2 at the spec's line, no traceback,
    nothing written, no INT8 entry cached."""
    frames = _noise(tmp_path / "noise") if case == "noise" else None
    precision = INT8.replace("[c2]", "[c3]") if case == "layer" else INT8
    spec = _spec(tmp_path / "spec", precision, frames=frames)
    line = next(number for number, text in enumerate(spec.read_text().splitlines(), 1)
                if text.strip().startswith(field.split(".")[1]))
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(spec), "-o", str(out), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error[model-build-failed]" in err, err
    assert re.search(rf"{re.escape(str(spec))}:{line}:\d+: models\[0\]\.{field}: {message}",
                     err), err
    assert not out.exists() and not list((cache / "int8").rglob("entry.json"))
