"""ONNX Runtime's profiler JSON: kernels filed under the run that holds them, session phases
kept, a file that is not a profile refused (the real-run parse is in test_host_profile.py)."""

from __future__ import annotations

import json

import pytest

from edgefuse.errors import EdgefuseError
from edgefuse.profile.ort_trace import read_ort_profile

pytestmark = pytest.mark.unit


def _event(cat, name, ts, dur, **args):
    return {"cat": cat, "pid": 1, "tid": 1, "ph": "X", "name": name, "ts": ts, "dur": dur,
            "args": args}


def test_kernels_are_filed_under_their_run_and_repeated_kernels_add_up(tmp_path):
    events = [
        _event("Session", "model_loading_array", 0, 50),
        _event("Session", "session_initialization", 60, 100),
        _event("Node", "conv_kernel_time", 201, 30, thread_scheduling_stats={}),
        _event("Node", "conv_kernel_time", 235, 5, op_name="Conv", provider="CPUExecutionProvider"),
        _event("Node", "relu_kernel_time", 241, 4, op_name="Relu"),
        _event("Session", "SequentialExecutor::Execute", 200, 48),
        _event("Session", "model_run", 199, 50),
        _event("Node", "conv_kernel_time", 301, 20, op_name="Conv"),
        _event("Node", "relu_kernel_time", 322, 3, op_name="Relu"),
        _event("Session", "model_run", 300, 30),
    ]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events))
    trace = read_ort_profile(path)
    assert [run.wall_us for run in trace.runs] == [50, 30]
    assert trace.runs[0].kernel_us == {"conv": 35, "relu": 4}
    assert trace.runs[1].kernel_us == {"conv": 20, "relu": 3}
    assert trace.kernels["conv"].op == "Conv"  # taken from the event that carries it
    assert trace.kernels["conv"].provider == "CPUExecutionProvider"
    assert [name for name, _, _ in trace.phases] == ["model_loading_array",
                                                     "session_initialization"]


@pytest.mark.parametrize("text", ["{\"traceEvents\": []}", "not json"])
def test_a_file_that_is_not_an_onnxruntime_profile_is_refused(tmp_path, text):
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(EdgefuseError, match="profile"):
        read_ort_profile(path)
