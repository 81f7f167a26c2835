"""Issue 30 §4: the YoloHead kernel's candidate cap follows the Unified Buffer the kernel is
built against. The 310B's UB is 248 KiB (Ascend C's TOTAL_UB_SIZE for __NPU_ARCH__ 3002), not
256 KiB (the 310P's): 2816 candidates at 80 classes and max_det 300, not 2944. Where the toolkit
is present compile reads ``get_soc_spec("UB_SIZE")`` and records it; sim emulates the recorded
cap. The toolkit here is a stand-in ``tbe.common.platform`` that behaves as its pages say: it
answers for the soc last set with ``set_current_compile_soc_info`` and, unset, for Ascend310."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from edgefuse import open_session
from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.compile.unified_buffer import TABLE, TOOLKIT, unified_buffer
from edgefuse.acl.ops.yolo_head.spec import candidate_capacity
from tests.fallback.test_sim_device_ops import (
    BOXES_PAST_CAP,
    CLASSES,
    capped_reference,
    head_model,
    overlapping_predictions,
)
from tests.model_builders import save

pytestmark = pytest.mark.ort

STAND_IN_UB = {"Ascend310": 248 * 1024, "Ascend310B4": 160 * 1024}


@pytest.fixture(autouse=True)
def no_atc(monkeypatch):
    monkeypatch.setenv("PATH", "")


def _toolkit(monkeypatch) -> dict:
    """A stand-in ``tbe.common.platform`` in sys.modules; returns the calls it saw."""
    state = {"soc": "Ascend310", "calls": []}

    def set_current_compile_soc_info(soc_version, core_type="AiCore", aicore_num=None,
                                     l1_fusion=None):
        state["calls"].append(("set", soc_version))
        if soc_version not in STAND_IN_UB:
            return "error"
        state["soc"] = soc_version
        return "success"

    def get_soc_spec(key):
        state["calls"].append(("get", key))
        if key != "UB_SIZE":
            raise KeyError(key)
        return STAND_IN_UB[state["soc"]]

    platform = types.ModuleType("tbe.common.platform")
    platform.set_current_compile_soc_info = set_current_compile_soc_info
    platform.get_soc_spec = get_soc_spec
    common = types.ModuleType("tbe.common")
    common.platform = platform
    tbe = types.ModuleType("tbe")
    tbe.common = common
    for name, module in (("tbe", tbe), ("tbe.common", common), ("tbe.common.platform", platform)):
        monkeypatch.setitem(sys.modules, name, module)
    return state


def test_the_310b_cap_is_that_of_248_kib():
    attrs = {"num_classes": 80, "max_detections": 300}
    assert candidate_capacity("ascend310b", attrs) == 2816
    assert candidate_capacity("ascend310p", attrs) == 2944
    assert unified_buffer("Ascend310B4").bytes == 248 * 1024


def test_without_the_toolkit_the_table_is_named_as_the_source():
    found = unified_buffer("Ascend310B4")
    assert (found.bytes, found.source) == (248 * 1024, TABLE)


def test_the_toolkit_is_asked_for_the_target_soc(monkeypatch):
    state = _toolkit(monkeypatch)
    found = unified_buffer("Ascend310B4")
    assert (found.bytes, found.source) == (160 * 1024, TOOLKIT)
    assert state["calls"] == [("set", "Ascend310B4"), ("get", "UB_SIZE")]


def test_a_soc_the_toolkit_refuses_falls_back_to_the_table_and_says_so(monkeypatch):
    _toolkit(monkeypatch)
    found = unified_buffer("Ascend310P3")
    assert found.bytes == 256 * 1024 and "does not know Ascend310P3" in found.source


def test_sim_emulates_the_cap_of_the_ub_compile_read(tmp_path, monkeypatch):
    _toolkit(monkeypatch)
    attrs = {"max_detections": 16, "score_threshold": 0.001}
    model = head_model(BOXES_PAST_CAP, **attrs)
    build = tmp_path / "build"
    compile_model(save(model, tmp_path / "head.onnx"), "Ascend310B4", build,
                  precision="must_keep_origin_dtype")
    monkeypatch.delitem(sys.modules, "tbe.common.platform")  # sim runs where no toolkit is
    record = json.loads((build / "manifest.json").read_text())["custom_ops"]
    assert record["unified_buffer"] == {"bytes": 160 * 1024, "source": TOOLKIT}
    capacity = candidate_capacity("ascend310b", {"num_classes": CLASSES, **attrs},
                                  ub_bytes=160 * 1024)
    assert capacity == 1472 and str(capacity) in record["warnings"][0]
    x = overlapping_predictions(BOXES_PAST_CAP)
    x[0, 4:, :] *= 0.5
    x[0, 4, 2000:2050] = 0.99  # past the toolkit's cap, within the table's
    with open_session(build, backends="sim") as sim:
        on_sim = sim.run({"x": x})
    expected = capped_reference(x, capacity, **attrs)
    for name, want in zip(("boxes", "scores", "classes", "num_detections"), expected,
                          strict=True):
        np.testing.assert_array_equal(on_sim[name], want, err_msg=name)
    assert on_sim["scores"][0, 0] < np.float32(0.99)
