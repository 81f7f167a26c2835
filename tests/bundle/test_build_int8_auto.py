"""``keep_fp16: auto`` in a build spec: the build keeps FP16 the layers whose INT8 moves the task
metric, as ``quantize --int8 --keep-fp16 auto`` does (the reference: the CLI on the same model and
photos), by default where the model's task is known; the choice is in the bundle's MANIFEST and
reports, the task gate fails the build, and auto without a task is refused at the spec's line.

The model is ``sensitive_net`` (tests/quantize/test_int8_mixed.py): one layer (conv3) whose INT8
input loses every class decision, two that lose none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

from edgefuse.bundle.builder import build
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_problems import SpecError
from edgefuse.bundle.stages import BuildGateError, int8_summary
from edgefuse.cli.main import main
from tests.acl.models import put_fake_atc_on_path
from tests.bundle.int8_specs import build_one, spec_folder
from tests.bundle.models import pixel_head
from tests.quantize.test_int8_mixed import sensitive_net

pytestmark = pytest.mark.ort

MODELS = """\
  - name: net
    source: net.onnx
{task}    precision:
      mode: int8
      calibration: frames/
{precision}    verify: {{samples: 1{verify}}}
"""
TASK = "    task: classify\n"


def _spec(folder: Path, *, task: str = TASK, precision: str = "", verify: str = "",
          model: onnx.ModelProto | None = None) -> Path:
    return spec_folder(folder, MODELS.format(task=task, precision=precision, verify=verify),
                       model or sensitive_net(), "net.onnx")


@pytest.fixture(scope="module")
def auto_build(tmp_path_factory):
    """A spec that declares the task and writes no keep_fp16, built once with the ATC stand-in."""
    root = tmp_path_factory.mktemp("int8auto")
    with pytest.MonkeyPatch.context() as patch:
        put_fake_atc_on_path(patch)
        outcome = build(_spec(root / "spec"), root / "out", cache_dir=root / "cache",
                        progress=False)
    return root, outcome


def test_a_known_task_keeps_the_sensitive_layer_fp16_as_the_cli_does(auto_build, tmp_path):
    root, outcome = auto_build
    folder = outcome.bundle_dir / "models" / "net"
    simple = (folder / "int8" / "simple_config.cfg").read_text()
    assert 'skip_layers: "conv3"' in simple and simple.count("skip_layers") == 1
    # The reference: quantize --int8 on the same model and photos, the task given.
    assert main(["quantize", str(root / "spec" / "net.onnx"), "--int8", "--inputs",
                 str(root / "spec" / "frames"), "--task", "classify", "-o",
                 str(tmp_path / "q")]) == 0
    assert (tmp_path / "q" / "simple_config.cfg").read_text() == simple
    cli_report = json.loads((tmp_path / "q" / "int8_report.json").read_text())
    report = json.loads((folder / "reports" / "int8.json").read_text())
    assert report["keep_fp16"] == cli_report["keep_fp16"] == ["conv3"]
    for ours, theirs in zip(report["sensitivity"], cli_report["sensitivity"], strict=True):
        assert (ours["node"], ours["metric_alone"]) == (theirs["node"], theirs["metric_alone"])
        assert ours["output_error"] == pytest.approx(theirs["output_error"], rel=1e-8)
    assert "seconds" not in report  # equal builds, equal bytes


def test_the_manifest_records_the_choice_as_a_host_prediction(auto_build):
    _, outcome = auto_build
    record = json.loads((outcome.bundle_dir / "MANIFEST.json").read_text())["models"]["net"]
    int8 = record["int8"]
    assert int8["keep_fp16"] == ["conv3"] and int8["keep_fp16_chosen"] == "automatically"
    automatic = int8["automatic"]
    assert (automatic["task"], automatic["fp16"], automatic["int8_all_layers"],
            automatic["int8_mixed"], automatic["passed"]) == ("classify", 1.0, 0.0, 1.0, True)
    assert automatic["kept"] == [{"layer": "conv3", "reason": "search", "buys_points": 100.0}]
    assert "until a board confirms it" in automatic["note"]
    assert automatic["report"] == "models/net/reports/int8.json"
    assert record["gates"]["int8_max_drop"] == 1.0
    metadata = json.loads((outcome.bundle_dir / "models/net/metadata.json").read_text())
    assert metadata["gates"]["int8_max_drop"] == 1.0


def test_the_build_prints_the_kept_layers(tmp_path, capsys, monkeypatch):
    put_fake_atc_on_path(monkeypatch)
    spec = _spec(tmp_path / "spec")
    assert main(["build", str(spec), "-o", str(tmp_path / "out"), "--cache",
                 str(tmp_path / "cache")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"net: INT8, kept FP16 \(chosen by \w+\): conv3; \w+ FP16 1\.0000, all "
                     r"INT8 0\.0000, mixed 1\.0000 \(host prediction until a board confirms "
                     r"it\)", err), err


def test_none_keeps_nothing_and_the_cosine_gate_then_fails(tmp_path):
    """The premise of the automatic choice: without conv3 in FP16 the model's INT8 is broken."""
    spec = _spec(tmp_path / "spec", precision="      keep_fp16: none\n")
    with pytest.raises(BuildGateError, match=r"model 'net' failed the int8 gate"):
        build_one(spec, tmp_path / "cache")


def test_names_beside_auto_stay_kept_and_the_settings_are_in_the_key(tmp_path):
    spec = _spec(tmp_path / "spec", precision="      keep_fp16: [auto, conv1]\n")
    built = build_one(spec, tmp_path / "cache")
    assert built.entries["int8"].info["keep_fp16"] == ["conv1", "conv3"]
    assert {k["layer"]: k["reason"] for k in built.entries["int8"].info["automatic"]["kept"]} \
        == {"conv1": "user", "conv3": "search"}
    assert all(build_one(spec, tmp_path / "cache").cached.values())
    for old, new in (("keep_fp16: [auto, conv1]", "keep_fp16: [auto, conv1]\n      "
                      "keep_fp16_budget_s: 300"),
                     ("samples: 1", "samples: 1, int8_max_drop: 5")):
        spec.write_text(spec.read_text().replace(old, new))
        again = build_one(spec, tmp_path / "cache").cached
        assert not again["int8"] and again["fp16"], (old, again)


def test_a_search_cut_by_its_budget_fails_the_task_gate_saying_so(tmp_path):
    spec = _spec(tmp_path / "spec", precision="      keep_fp16_budget_s: 0.000001\n")
    with pytest.raises(BuildGateError, match=r"model 'net' failed the int8 task gate") as caught:
        build_one(spec, tmp_path / "cache")
    assert "time-budget" in caught.value.context and "keep_fp16_budget_s" in caught.value.hint


def test_auto_without_a_task_is_refused_at_the_specs_line(tmp_path, capsys):
    spec = _spec(tmp_path / "spec", task="", precision="      keep_fp16: auto\n",
                 model=pixel_head(size=32))
    line = next(number for number, text in enumerate(spec.read_text().splitlines(), 1)
                if "keep_fp16" in text)
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(spec), "-o", str(out), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(rf"{re.escape(str(spec))}:{line}:\d+: models\[0\]\.precision\.keep_fp16: "
                     r"keep_fp16: auto chooses the layers by the task metric .* the model "
                     r"declares no task", err), err
    assert "task: detect" in err and not out.exists()


def test_without_a_task_the_default_keeps_nothing(tmp_path):
    """As quantize --int8 without --task: no metric to choose by, so no layer is kept."""
    spec = _spec(tmp_path / "spec", task="", model=pixel_head(size=32))
    built = build_one(spec, tmp_path / "cache")
    assert built.entries["int8"].info["keep_fp16"] == []
    assert built.entries["int8"].info["automatic"] is None
    assert built.entries["int8"].info["keep_fp16_chosen"].startswith(
        "none chosen automatically: the model declares no task")
    assert int8_summary(built).startswith("net: INT8, kept FP16 (none chosen automatically")


@pytest.mark.parametrize(("precision", "verify", "field", "message"), [
    ("      keep_fp16: [none, conv1]\n", "", "precision.keep_fp16",
     r"'none' cannot be combined with other entries"),
    ("      keep_fp16: none, conv1\n", "", "precision.keep_fp16",
     r"'none' cannot be combined with other entries"),
    ("      keep_fp16_budget_s: 0\n", "", "precision.keep_fp16_budget_s", r"0"),
    ("", ", int8_max_drop: 101", "verify.int8_max_drop", r"101"),
])
def test_a_wrong_auto_setting_names_its_line_and_field(tmp_path, precision, verify, field,
                                                       message):
    spec = _spec(tmp_path / "spec", precision=precision, verify=verify)
    with pytest.raises(SpecError, match=r"1 problem") as caught:
        load_spec(spec)
    [problem] = caught.value.problems
    assert re.search(message, problem.message), problem.message
    assert f": models[0].{field}: " in problem.render(str(spec))


def test_one_string_holds_the_entries_comma_separated(tmp_path):
    spec = _spec(tmp_path / "spec", precision="      keep_fp16: auto, conv1\n")
    assert load_spec(spec).models[0].int8.keep_fp16 == ("auto", "conv1")


def test_auto_settings_with_another_mode_are_refused(tmp_path):
    spec = _spec(tmp_path / "spec", verify=", int8_max_drop: 2")
    spec.write_text(spec.read_text().replace("mode: int8\n      calibration: frames/\n",
                                             "mode: force_fp16\n"))
    with pytest.raises(SpecError, match=r"'int8_max_drop' applies to `mode: int8`"):
        load_spec(spec)
