"""The board profile: msprof's op_summary CSV parsed into the table, and the flow that runs the
BUILD_DIR under msprof (a stand-in here).

Board profiling was NOT run here: no NPU, no CANN. The sample data/op_summary_0_1_1.csv follows
the column list CANN 7.0 documents for op_summary_*.csv ("op_summary (Operator Details)",
https://www.hiascend.com/document/detail/en/mindstudio/700/TITools/Profiling/
atlasprofiling_16_0067.html; zh: https://www.hiascend.com/document/detail/zh/canncommercial/700/
devtools/auxiliarydevtool/atlasprofiling_16_0201.html): Device_id, Model ID, Task ID, Stream ID,
Op Name, OP Type, Task Type, Task Start Time(us), Task Duration(us), Task Wait Time(us), Block
Dim, Input Shapes, Input Data Types, Input Formats, Output Shapes, Output Data Types, Output
Formats (Model Name and Infer ID are "not displayed by default"; Mix Block Dim is for Atlas A2
training products only; the AI Core metric columns that follow depend on --aic-metrics and are
left out). Shapes are quoted and ';'-separated per input as the page describes. Its values are
made up: three inferences of the tiny Conv -> Add model, the first one the warm-up.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import onnx
import pytest

from edgefuse._version import __version__
from edgefuse.errors import EdgefuseError, ToolError
from edgefuse.manifest import BuildManifest, TensorEntry, write_manifest
from edgefuse.profile.board import board_report, profile_on_board
from edgefuse.profile.msprof import read_op_summary
from edgefuse.profile.socs import soc_peaks
from tests.profile.models import conv_bn_relu

pytestmark = pytest.mark.unit

SAMPLE = Path(__file__).parent / "data" / "op_summary_0_1_1.csv"


def test_the_sample_parses_into_one_task_per_op_in_execution_order():
    tasks = read_op_summary(SAMPLE)
    assert [t.name for t in tasks] == ["trans_TransData_0", "conv", "add"]
    conv = tasks[1]
    assert conv.op_type == "Conv2D" and conv.task_type == "AI_CORE"
    assert conv.durations_us == [12.5, 10.0, 11.0]


def test_the_board_table_drops_the_warmup_and_takes_the_median():
    report = board_report(read_op_summary(SAMPLE), conv_bn_relu(), label="build", warmup=1,
                          peaks=soc_peaks("Ascend310B4"))
    times = {row.name: row.time_us for row in report.rows}
    assert times == {"trans_TransData_0": pytest.approx(4.02), "conv": pytest.approx(10.5),
                     "add": pytest.approx(3.05)}
    assert report.runs == 2
    conv = next(row for row in report.rows if row.name == "conv")
    assert conv.origins == ["conv"] and conv.flops == 2 * 2048 * 27
    assert conv.floor_us is not None and conv.floor_us < conv.time_us  # measured vs floor
    transdata = report.rows[0]
    assert transdata.origins == [] and transdata.floor_us is None
    assert "no node of that name" in report.render()


def test_a_csv_without_the_duration_column_is_refused(tmp_path):
    bad = tmp_path / "op_summary_0.csv"
    bad.write_text("Op Name,OP Type\nconv,Conv2D\n")
    with pytest.raises(EdgefuseError, match="no column 'Task Duration\\(us\\)'"):
        read_op_summary(bad)


def test_a_duration_of_na_says_to_collect_task_time(tmp_path):
    bad = tmp_path / "op_summary_0.csv"
    bad.write_text("Op Name,OP Type,Task Duration(us)\nconv,Conv2D,N/A\n")
    with pytest.raises(EdgefuseError, match="task-time=on, the default, or l0/l1"):
        read_op_summary(bad)


def test_a_task_time_l0_file_is_read_with_its_op_types_unknown(tmp_path):
    """At --task-time=l0 only OP Type and Task Type read N/A (CANN 8.0's op_summary fields)."""
    l0 = tmp_path / "op_summary_0.csv"
    l0.write_text("Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us),Block Dim\n"
                  "conv,N/A,N/A,10,12.5,0\nrelu,N/A,N/A,30,2.0,0\nconv,N/A,N/A,50,11.5,0\n")
    tasks = read_op_summary(l0)
    assert [(t.name, t.op_type, t.durations_us) for t in tasks] == [
        ("conv", "N/A", [12.5, 11.5]), ("relu", "N/A", [2.0])]


def _fake_build(tmp_path: Path) -> Path:
    """A BUILD_DIR as compile writes it; its OM is a placeholder nobody loads here."""
    build = tmp_path / "build"
    build.mkdir()
    onnx.save(conv_bn_relu(), str(build / "model.onnx"))
    (build / "model.om").write_bytes(b"om")
    write_manifest(build, BuildManifest(
        model="model.onnx", om="model.om", soc="Ascend310B4", edgefuse_version=__version__,
        inputs=(TensorEntry("x", (1, 3, 16, 16), "float32"),),
        outputs=(TensorEntry("y", (1, 8, 16, 16), "float32"),)))
    return build


def test_without_msprof_board_profiling_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolError, match="msprof is not on PATH"):
        profile_on_board(_fake_build(tmp_path), runs=2, warmup=1, peaks=None)


def test_the_board_flow_runs_bench_under_msprof_and_reads_its_summary(tmp_path):
    msprof = tmp_path / "msprof"
    log = tmp_path / "msprof.args"
    msprof.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {log}\n"
        "out=$(printf '%s\\n' \"$@\" | sed -n 's/^--output=//p')\n"
        "mkdir -p \"$out/PROF_1/device_0/summary\"\n"
        f"cp {SAMPLE} \"$out/PROF_1/device_0/summary/op_summary_0_1_1.csv\"\n")
    msprof.chmod(msprof.stat().st_mode | stat.S_IEXEC)
    report = profile_on_board(_fake_build(tmp_path), runs=2, warmup=1, peaks=None,
                              msprof=str(msprof))
    assert [row.name for row in report.rows] == ["trans_TransData_0", "conv", "add"]
    arguments = log.read_text().splitlines()
    application = next(a for a in arguments if a.startswith("--application="))
    assert "-m edgefuse bench" in application and "--backend acl" in application
    assert "--task-time=on" in arguments
    assert os.path.isdir(tmp_path / "build")
