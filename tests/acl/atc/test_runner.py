"""ATC subprocess handling, proven with the stand-in tests/fakes/atc put on PATH."""

import shutil
import signal

import pytest

from edgefuse.acl.atc.codes import KNOWN_CODES, find_diagnostics, hint_for
from edgefuse.acl.atc.runner import AtcError, cann_version, find_atc, run_atc
from tests.acl.models import FAKES, hide_atc, put_fake_atc_on_path

pytestmark = pytest.mark.standin

ARGV = ["atc", "--framework=5", "--model=model.onnx", "--output=model",
        "--soc_version=Ascend310B4", "--input_shape=x:1,3,8,8", "--log=error"]


def _run(tmp_path, timeout=30.0, echo=None):
    return run_atc([shutil.which("atc"), *ARGV[1:]], cwd=tmp_path, om_path=tmp_path / "model.om",
                   log_path=tmp_path / "atc.log", timeout=timeout, echo=echo)


def test_find_atc_follows_path(monkeypatch):
    put_fake_atc_on_path(monkeypatch)
    assert find_atc() == str(FAKES / "atc")
    hide_atc(monkeypatch)
    assert find_atc() is None


def test_success_needs_exit_zero_and_the_om(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "success")
    lines = []
    result = _run(tmp_path, echo=lines.append)
    assert result.om_path.read_bytes() == b"fake om for model"
    assert result.success_marker_seen
    log = (tmp_path / "atc.log").read_text()
    assert log.startswith("ATC start working now") and "ATC run success" in log
    assert lines == log.splitlines()  # streamed line by line, in order


def test_exit_zero_without_om_is_a_failure(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "no-om")
    with pytest.raises(AtcError, match="exited with status 0 but wrote no model.om") as exc:
        _run(tmp_path)
    assert exc.value.reference == "atc-no-output"


EXPECTED = {
    # code: (node named in the message, op type, a phrase of the meaning)
    "E16002": (None, None, "no ONNX parser is registered"),
    "E19010": ("Conv_52", "ai.onnx::11::Convx", "no ONNX parser plugin"),
    "EZ9010": ("Conv_52", "ai.onnx::11::Convx", "no ONNX parser plugin"),
    "EZ0501": ("Conv_52", "Conv", "REG_OP"),
    "EZ3002": (None, "Conv2D", "no kernel on this SoC accepts"),
    "EZ3003": ("Conv_52", "Conv", "no kernel and engine"),
    "E20001": ("/model/layers.20/self_attn/Slice_ascend_mbatch_batch_5", "StridedSliceD",
               "TBE compiler failed"),
    "E10001": ("input_2", None, "--input_shape"),
    "E19999": (None, None, "internal error"),
}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_known_code_is_mapped_to_its_message(monkeypatch, tmp_path, code):
    put_fake_atc_on_path(monkeypatch, code)
    with pytest.raises(AtcError) as exc:
        _run(tmp_path)
    error = exc.value
    node, op_type, meaning = EXPECTED[code]
    assert error.reference == "atc-failed" and error.returncode == 1
    assert error.diagnostics[0].code == code
    assert error.diagnostics[0].node == node and error.diagnostics[0].op_type == op_type
    assert code in error.message and (node is None or node in error.message)
    assert meaning in error.context and error.hint == hint_for(error.diagnostics[0])
    assert f"full log: {tmp_path / 'atc.log'}" in error.context
    assert "ATC run failed" in error.context  # the log tail is shown


def test_e19010_for_an_edgefuse_op_says_to_install_the_op_package(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "E19010-custom-op")
    with pytest.raises(AtcError, match=r"ATC failed with E19010 at node Swish_0 "
                                       r"\(ai.onnx::11::Swish\)") as exc:
        _run(tmp_path)
    hint = exc.value.hint
    assert hint.startswith("Swish is an edgefuse custom op")
    assert "edgefuse ops build --soc SOC -o OPP_DIR" in hint and "bash OPP_DIR/install.sh" in hint
    assert "--no-custom-ops" in hint


def test_a_no_parser_code_for_another_op_keeps_the_general_hint():
    for line in ("E16002: No ONNX parser is registered for optype [ai.onnx::11::Convx].",
                 "E19010: No parser is registered for Op [Conv_52, optype [ai.onnx::11::Convx]]."):
        diagnostic = find_diagnostics(line)[0]
        assert diagnostic.op_type == "ai.onnx::11::Convx"
        assert hint_for(diagnostic) == KNOWN_CODES[diagnostic.code].hint


def test_traceback_nodes_are_listed_too(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "E19010")
    with pytest.raises(AtcError) as exc:
        _run(tmp_path)
    assert ("failing nodes: Conv_52 (ai.onnx::11::Convx), Conv_112 (ai.onnx::11::Convx)"
            in exc.value.context)


def test_failure_without_a_code(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "nocode")
    with pytest.raises(AtcError, match=r"exit status 3\) without an error code"):
        _run(tmp_path)


def test_timeout_stops_atc_and_keeps_the_log(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "timeout")
    with pytest.raises(AtcError, match="did not finish within 1 s") as exc:
        _run(tmp_path, timeout=1.0)
    assert exc.value.reference == "atc-timeout"
    assert (tmp_path / "atc.log").read_text().startswith("ATC start working now")


def test_crash_by_signal(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "crash")
    with pytest.raises(AtcError, match="killed by SIGSEGV") as exc:
        _run(tmp_path)
    assert exc.value.reference == "atc-crashed" and exc.value.returncode == -signal.SIGSEGV


def test_relocated_error_points_at_the_new_log(monkeypatch, tmp_path):
    put_fake_atc_on_path(monkeypatch, "EZ3003")
    with pytest.raises(AtcError) as exc:
        _run(tmp_path)
    moved = exc.value.relocated(tmp_path / "elsewhere.log")
    assert "full log: " + str(tmp_path / "elsewhere.log") in moved.context
    assert moved.message == exc.value.message and moved.reference == "atc-failed"


def test_unknown_codes_are_still_reported():
    found = find_diagnostics("ATC run failed\nE99999: something new [x]\n")
    assert [(d.code, d.known) for d in found] == [("E99999", None)]


def test_cann_version_from_the_install_info(tmp_path):
    info = tmp_path / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir()
    info.write_text("package_name=Ascend-cann-toolkit\nversion=7.0.0\narch=aarch64\n")
    assert cann_version({"ASCEND_HOME_PATH": str(tmp_path)}) == "7.0.0"
    assert cann_version({}) is None
