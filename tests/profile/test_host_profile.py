"""The host profile on a real ONNX Runtime run: the profiler's JSON parsed, kernels mapped back to
the model's nodes and, through optimize's provenance, to the nodes before optimize."""

from __future__ import annotations

import json

import onnx
import pytest

from edgefuse.acl.compile.compile import compile_model
from edgefuse.optimize import optimize
from edgefuse.profile.run import profile
from tests.profile.models import BN_FLOPS, CONV_FLOPS, RELU_FLOPS, conv_bn_relu

pytestmark = pytest.mark.ort


def _row_of(report, node):
    (row,) = [row for row in report.rows if node in row.origins]
    return row


def test_the_fused_conv_points_back_to_conv_batchnorm_and_relu():
    report = profile(conv_bn_relu(), "cpu", runs=3, warmup=1)
    row = _row_of(report, "conv")
    assert row.origins == ["conv", "bn", "relu"]  # ONNX Runtime fused all three into one kernel
    assert row.flops == CONV_FLOPS + BN_FLOPS + RELU_FLOPS
    assert row.op_type == "Conv" and row.unit == "cube"
    assert row.time_us > 0
    assert _row_of(report, "add").origins == ["add"]
    assert report.runs == 3 and report.warmup == 1
    assert report.total_us == pytest.approx(sum(r.time_us for r in report.rows))


def test_after_optimize_the_row_names_the_nodes_before_it_and_the_rule():
    optimized = optimize(conv_bn_relu()).model
    report = profile(optimized, "cpu", runs=2, warmup=1)
    row = _row_of(report, "conv")
    assert row.origins == ["conv", "relu"]  # the BatchNorm is inside the Conv's weights now
    assert row.sources == ["conv", "bn", "relu"]
    assert row.rules == ["fold-bn-into-conv"]
    assert row.flops == CONV_FLOPS + 2048 + RELU_FLOPS  # the fold gave the Conv a bias: 1/output


def test_every_model_node_is_run_or_listed_as_folded_away():
    report = profile(conv_bn_relu(), "cpu", runs=1, warmup=0)
    covered = {name for row in report.rows for name in row.origins}
    assert covered | set(report.folded_away) == {"conv", "bn", "relu", "add"}


def test_the_trace_opens_as_trace_events_with_a_track_per_stage(tmp_path):
    trace = tmp_path / "trace.json"
    profile(conv_bn_relu(), "cpu", runs=2, warmup=1, soc="Ascend310B4", trace=trace)
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert tracks == {"session", "runs", "kernels", "floor (lower bound)"}
    spans = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], float | int) and e["dur"] >= 0 for e in spans)
    assert sum(1 for e in spans if e["cat"] == "run") == 2
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_the_floor_is_labelled_a_lower_bound_in_the_table_and_the_json():
    report = profile(conv_bn_relu(), "cpu", runs=1, warmup=0, soc="Ascend310B4")
    assert "LOWER BOUND" in report.render()
    assert "lower bound" in report.to_json()["floor_is"]
    assert report.floor_us == pytest.approx(sum(r.floor_us for r in report.rows
                                                 if r.floor_us is not None))
    onnx.checker.check_model(conv_bn_relu())


def test_the_sim_backend_profiles_a_build_as_the_board_contract_runs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")  # compile writes the build; there is no ATC, so no OM
    source = tmp_path / "model.onnx"
    onnx.save(conv_bn_relu(), str(source))
    compile_model(source, "Ascend310B4", tmp_path / "build")
    report = profile(tmp_path / "build", "sim", runs=2, warmup=1, soc="Ascend310B4")
    assert report.backend == "sim"
    # the FP16 emulation rounds every tensor (Cast pairs), so no fusion happens across it: the
    # Conv kernel ("c.unrounded_nchwc") stands for the Conv alone, the Casts for nothing
    assert _row_of(report, "conv").origins == ["conv"]
    assert _row_of(report, "relu").origins == ["relu"]
    casts = [row for row in report.rows if row.kernel_ops == "Cast"]
    assert casts and all(row.origins == [] for row in casts)
