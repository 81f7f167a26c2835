"""The spec's error corpus: every broken spec names the line and column and says what to write.

Each case is a whole spec with one mistake; ``anchor`` is the text on the expected line where
the reported column must point. Then: every problem of a spec is reported at once, and a good
spec loads into typed records with the defaults filled in.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_problems import SpecError
from edgefuse.cli.main import main
from edgefuse.optimize.append_yolo_head import yolo_head_options

pytestmark = pytest.mark.unit

GOOD = """\
apiVersion: edgefuse/v1
bundle:
  name: corpus
  version: 1.0.0
target:
  soc: Ascend310B4
models:
  - name: det
    source: yolov8n:tiny
app:
  kind: detection
  model: det
service:
  restart: always
python:
  version: "3.10"
  wheels: download
"""


def _edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


WRONG_FORM = r"(?s:.*) has the wrong form"
CANN_HOME_FIX = r"no ':', space or newline"

# (id, spec text, line, anchor on that line, message pattern, fix pattern)
CASES = [
    ("unknown-top-key", _edit("models:", "modles:"), 7, "modles",
     r"unknown key 'modles'", r"did you mean 'models'"),
    ("unknown-model-key", _edit("    source: yolov8n:tiny\n",
                                "    source: yolov8n:tiny\n    precison: {mode: force_fp16}\n"),
     10, "precison", r"unknown key 'precison'", r"did you mean 'precision'"),
    ("wrong-api-version", _edit("edgefuse/v1", "edgefuse/v2"), 1, "edgefuse/v2",
     r"not allowed", r"apiVersion: edgefuse/v1"),
    ("missing-bundle", _edit("bundle:\n  name: corpus\n  version: 1.0.0\n", ""), 1, "apiVersion",
     r"missing required key 'bundle'", r"bundle:"),
    ("missing-source", _edit("    source: yolov8n:tiny\n", ""), 8, "name: det",
     r"missing required key 'source'", r"source: yolov8n:tiny"),
    ("models-not-a-list", _edit("models:\n  - name: det\n    source: yolov8n:tiny\n",
                                "models: det\n"), 7, "det", r"must be a list", r"models:"),
    ("shape-string", _edit("    source: yolov8n:tiny\n",
                           "    source: yolov8n:tiny\n    input: [1, 3, \"96\", 96]\n"),
     10, '"96"', r"must be an integer", r"without quotes"),
    ("shape-negative", _edit("    source: yolov8n:tiny\n",
                             "    source: yolov8n:tiny\n    input: [1, 3, -96, 96]\n"),
     10, "-96", r"must be at least 1", r"640"),
    ("gate-above-one", _edit("    source: yolov8n:tiny\n",
                             "    source: yolov8n:tiny\n    verify: {fp16_min_cosine: 1.5}\n"),
     10, "1.5", r"at most 1", r"fp16_min_cosine: 0.999"),
    ("precision-mode-typo", _edit("    source: yolov8n:tiny\n",
                                  "    source: yolov8n:tiny\n    precision: {mode: force_fp61}\n"),
     10, "force_fp61", r"not allowed", r"did you mean `force_fp16`"),
    ("app-kind-typo", _edit("kind: detection", "kind: detecton"), 11, "detecton",
     r"not allowed", r"did you mean `detection`"),
    ("restart-typo", _edit("restart: always", "restart: allways"), 14, "allways",
     r"not allowed", r"did you mean `always`"),
    ("bundle-name-form", _edit("name: corpus", "name: My Corpus"), 3, "My Corpus",
     r"wrong form", r"name: shapes-camera"),
    ("unknown-soc", _edit("soc: Ascend310B4", "soc: Ascend310B9"), 6, "Ascend310B9",
     r"unknown soc", r"write `soc: Ascend310B"),
    ("soc-spelling", _edit("soc: Ascend310B4", "soc: 310b4"), 6, "310b4",
     r"310b4", r"write `soc: Ascend310B4`"),
    ("catalogue-typo", _edit("source: yolov8n:tiny", "source: yolov8m:tiny"), 9, "yolov8m",
     r"neither a catalogue model nor a file", r"source: yolov8n:tiny"),
    ("missing-model-file", _edit("source: yolov8n:tiny", "source: weights/net.onnx"), 9,
     "weights/net.onnx", r"'weights/net.onnx' does not exist", r"relative to the spec"),
    ("missing-calibration", _edit("    source: yolov8n:tiny\n",
                                  "    source: yolov8n:tiny\n    verify: {calibration: calib/}\n"),
     10, "calib/", r"'calib/' does not exist", r"folder of images"),
    ("missing-classes-file", _edit("    source: yolov8n:tiny\n",
                                   "    source: yolov8n:tiny\n    classes: names.txt\n"),
     10, "names.txt", r"class-name file 'names.txt' does not exist", r"classes: \[circle"),
    ("duplicate-model-name", _edit("    source: yolov8n:tiny\n",
                                   "    source: yolov8n:tiny\n  - name: det\n"
                                   "    source: yolov8n:tiny\n"),
     10, "det", r"model name 'det' is used twice \(first at line 8\)", r"its own name"),
    ("app-model-unknown", _edit("model: det", "model: dte"), 12, "dte",
     r"'dte' is not one of the spec's models", r"write `model: det`"),
    ("yaml-duplicate-key",
     _edit("  soc: Ascend310B4\n", "  soc: Ascend310B4\n  soc: Ascend310P3\n"),
     7, "soc", r"key 'soc' is written twice \(first at line 6\)", r"delete one"),
    ("yaml-syntax", _edit("  kind: detection\n", "  kind: [detection\n"), 12, ": det",
     r"not valid YAML", r"indentation"),
    ("environment-name", _edit("restart: always", "restart: always\n  environment: {1BAD: x}"),
     15, "1BAD", r"not a valid environment variable name", r"letters, digits"),
    ("app-config-key", _edit("  model: det\n", "  model: det\n  config: {conf_thres: 0.3}\n"),
     13, "conf_thres", r"unknown key 'conf_thres'", r"did you mean 'conf'"),
    ("app-config-owned", _edit("  model: det\n", "  model: det\n  config: {source: 0}\n"),
     13, "source", r"set by the spec's app section", r"app.source"),
    ("input-and-inputs", _edit("    source: yolov8n:tiny\n",
                               "    source: yolov8n:tiny\n    input: [1, 3, 96, 96]\n"
                               "    inputs: {images: [1, 3, 96, 96]}\n"),
     11, "{images", r"either 'input'.*or 'inputs'", r"keep one"),
    ("pad-value-range", _edit("    source: yolov8n:tiny\n",
                              "    source: yolov8n:tiny\n    preprocess: {pad_value: 300}\n"),
     10, "300", r"at most 255", r"pad_value: 114"),
    ("aipp-missing-size", _edit("    source: yolov8n:tiny\n",
                                "    source: yolov8n:tiny\n    aipp: {input_format: RGB888}\n"),
     10, "{input_format", r"missing required key 'source_size'", r"source_size: \[640, 640\]"),
    ("pin-on-catalogue", _edit("    source: yolov8n:tiny\n",
                               "    source: yolov8n:tiny\n    sha256: " + "a" * 64 + "\n"),
     10, "aaaa", r"no file to pin", r"remove `sha256:`"),
    ("optimize-target", _edit("    source: yolov8n:tiny\n",
                              "    source: yolov8n:tiny\n    optimize: {target: gpu9}\n"),
     10, "gpu9", r"gpu9", r"target: cpu"),
    ("yolo-head-conf", _edit("    source: yolov8n:tiny\n",
                             "    source: yolov8n:tiny\n    optimize:\n"
                             "      yolo_head: {conf: 2, max_det: 100}\n"),
     11, "2", r"must be at most 1, got 2", r"conf: 0.25"),
    ("yolo-head-key", _edit("    source: yolov8n:tiny\n",
                            "    source: yolov8n:tiny\n    optimize:\n"
                            "      yolo_head: {thresh: 0.3}\n"),
     11, "thresh", r"unknown key 'thresh'", r"conf|iou|max_det"),
    ("unknown-board",
     _edit("  soc: Ascend310B4\n", "  soc: Ascend310B4\n  board: atlas-200i-dk-a3\n"),
     7, "atlas-200i-dk-a3", r"unknown board 'atlas-200i-dk-a3': edgefuse knows atlas-200i-dk-a2,",
     r"did you mean `board: atlas-200i-dk-a2`\? or describe it: .*glibc"),
    ("python-not-the-boards", _edit('version: "3.10"', 'version: "3.11"'), 16, '"3.11"',
     r"board 'atlas-200i-dk-a2' runs Python 3.10 \(Ubuntu 22.04\)", r"remove `version:`"),
    ("glibc-of-a-known-board",
     _edit("  soc: Ascend310B4\n", '  soc: Ascend310B4\n  glibc: "2.31"\n'),
     7, '"2.31"', r"is in edgefuse's table .*glibc 2.35", r"a name of its own"),
    ("board-python-too-old",
     _edit("  soc: Ascend310B4\n", "  soc: Ascend310B4\n  board: atlas-200i-dk-a2-openeuler\n"
           ).replace('  version: "3.10"\n', ""),
     7, "atlas-200i-dk-a2-openeuler", r"edgefuse needs Python >=3.10; the board's python3 is 3.9",
     r"newer python3"),
    ("described-board-without-python",
     _edit("  soc: Ascend310B4\n", '  soc: Ascend310B4\n  board: rk3588-box\n  glibc: "2.31"\n'
           "  arch: aarch64\n").replace('  version: "3.10"\n', ""),
     7, "rk3588-box", r"another board must be described \(python.version missing\)",
     r"python3 --version on the board"),
    ("yolo-head-with-host-layout", _edit("    source: yolov8n:tiny\n",
                                         "    source: yolov8n:tiny\n    optimize:\n"
                                         "      yolo_head: {}\n    postprocess:\n"
                                         "      layout: yolov8\n"),
     13, "yolov8", r"cannot decode as 'yolov8'", r"layout: yolo_head"),
    # issue 27 §19: a newline made a second line of the service's environment file
    ("cann-home-newline", _edit("  soc: Ascend310B4\n", '  soc: Ascend310B4\n  cann_home: '
                                '"/usr/local/Ascend/latest\\nLD_PRELOAD=/tmp/x.so"\n'),
     7, '"/usr', WRONG_FORM, CANN_HOME_FIX),
    ("cann-home-trailing-newline",
     _edit("  soc: Ascend310B4\n",
           '  soc: Ascend310B4\n  cann_home: "/usr/local/Ascend/latest\\n"\n'),
     7, '"/usr', WRONG_FORM, CANN_HOME_FIX),
    ("cann-home-colon", _edit("  soc: Ascend310B4\n",
                              "  soc: Ascend310B4\n  cann_home: /opt/cann:/tmp/evil\n"),
     7, "/opt", WRONG_FORM, CANN_HOME_FIX),
]


def _problems(text: str, folder: Path) -> list:
    spec = folder / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    rendered = caught.value.render()
    assert "error[bad-build-spec]" in rendered
    return list(caught.value.problems)


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 20
    assert len({case[0] for case in CASES}) == len(CASES)


def test_the_good_spec_loads(tmp_path):
    (tmp_path / "spec.yaml").write_text(GOOD, encoding="utf-8")
    spec = load_spec(tmp_path / "spec.yaml")
    model = spec.models[0]
    assert (model.source_kind, model.catalogue_name) == ("catalogue", ("yolov8n", "tiny"))
    assert model.verify["fp16_min_cosine"] == 0.999
    assert model.precision == {"mode": "force_fp16", "keep_fp32": "auto", "keep_io_types": False}
    assert spec.prefix == "/opt/edgefuse/corpus"
    assert spec.service["name"] == "edgefuse-corpus"
    assert spec.service["user"] == spec.service["group"] == "HwHiAiUser"
    assert model.optimize["yolo_head"] is None


def test_the_yolo_head_key_reaches_the_optimize_stage(tmp_path):
    text = _edit("    source: yolov8n:tiny\n", "    source: yolov8n:tiny\n    optimize:\n"
                 "      yolo_head: {conf: 0.3, iou: 0.5, max_det: 100}\n")
    (tmp_path / "spec.yaml").write_text(text, encoding="utf-8")
    head = load_spec(tmp_path / "spec.yaml").models[0].optimize["yolo_head"]
    options = yolo_head_options(head, "optimize.yolo_head")
    assert (options.score_threshold, options.iou_threshold, options.max_detections) == (
        0.3, 0.5, 100)


@pytest.mark.parametrize(("text", "line", "anchor", "message", "fix"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_broken_spec_points_at_the_line_and_says_what_to_write(tmp_path, text, line, anchor,
                                                                 message, fix):
    problems = _problems(text, tmp_path)
    matching = [p for p in problems if re.search(message, p.message)]
    assert matching, [p.render("spec.yaml") for p in problems]
    problem = matching[0]
    column = text.splitlines()[line - 1].index(anchor) + 1
    assert (problem.position.line, problem.position.column) == (line, column), problem
    assert problem.fix is not None and re.search(fix, problem.fix), problem.fix


def test_every_problem_is_reported_at_once(tmp_path):
    text = (GOOD.replace("models:", "models:", 1)
            .replace("soc: Ascend310B4", "soc: Ascend310B9\n  boad: x")
            .replace("source: yolov8n:tiny", "source: weights/net.onnx")
            .replace("restart: always", "restart: allways"))
    problems = _problems(text, tmp_path)
    messages = " | ".join(p.message for p in problems)
    for fragment in ("unknown soc", "unknown key 'boad'", "does not exist", "not allowed"):
        assert fragment in messages
    lines = [p.position.line for p in problems]
    assert lines == sorted(lines)


def test_a_missing_spec_file_is_a_user_error(tmp_path):
    with pytest.raises(Exception, match=r"does not exist") as caught:
        load_spec(tmp_path / "nope.yaml")
    assert caught.value.exit_code == 2


def test_the_cli_reports_a_bad_spec_with_exit_2_and_writes_nothing(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD.replace("restart: always", "restart: allways"), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["build", str(spec), "-o", str(out), "--cache", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "error[bad-build-spec]" in err and f"{spec}:14:12" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "c").exists()


def test_the_schema_is_printed_for_editors(capsys):
    assert main(["build", "--schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["properties"]["apiVersion"]["const"] == "edgefuse/v1"


@pytest.mark.parametrize(("content", "problem"), [
    (b"circle\n\xff\xfesquare\n", r"class-name file 'names.txt' is not UTF-8 text \(byte 7\)"),
    (None, r"class-name file 'names.txt' is a folder, not a text file"),
])
def test_a_classes_file_that_is_not_text_is_a_spec_problem(tmp_path, content, problem):
    if content is None:
        (tmp_path / "names.txt").mkdir()
    else:
        (tmp_path / "names.txt").write_bytes(content)
    text = _edit("    source: yolov8n:tiny\n", "    source: yolov8n:tiny\n    classes: names.txt\n")
    problems = _problems(text, tmp_path)
    assert [p.position.line for p in problems if re.search(problem, p.message)] == [10], problems


@pytest.mark.parametrize(("value", "message"), [
    ("1767225600000", r"SOURCE_DATE_EPOCH=1767225600000 is outside 315532800\.\.4102444800.*"
                      r"milliseconds is 1000 times too large"),
    ("12", r"SOURCE_DATE_EPOCH=12 is outside"),
    ("2026-01-01", r"SOURCE_DATE_EPOCH='2026-01-01' is not a number of seconds"),
])
def test_source_date_epoch_is_checked_before_anything_is_built(tmp_path, capsys, monkeypatch,
                                                                 value, message):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD, encoding="utf-8")
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["build", str(spec), "-o", str(out), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "error[bad-source-date-epoch]" in err and "Traceback" not in err, err
    assert re.search(message, err, re.S), err
    assert not out.exists() and not cache.exists()  # no model was built
