"""The op-support check on tiny graphs built to contain unsupported ops, and on clean ones."""

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.opsupport import (
    PREDICATES,
    check_model,
    format_ranges,
    load_table,
    parse_ranges,
)
from tests.acl.models import conv_relu, make_model, node

pytestmark = pytest.mark.unit


def _nms_model(inputs, *, constant=True, max_boxes=10):
    """boxes/scores graph inputs -> NonMaxSuppression with the given optional inputs."""
    initializers = {}
    if constant:
        initializers = {"max_boxes": np.array([max_boxes], np.int64),
                        "iou": np.array([0.5], np.float32), "score": np.array([0.1], np.float32)}
    graph_inputs = {"boxes": [1, 6, 4], "scores": [1, 2, 6]}
    if not constant:
        graph_inputs.update({"max_boxes_in": [1], "iou": [1], "score": [1]})
    names = ["boxes", "scores", "max_boxes" if constant else "max_boxes_in", "iou", "score"]
    nms = node("NonMaxSuppression", names[:inputs], ["selected"], name="nms")
    model = make_model([nms], graph_inputs, [], initializers, check=False)
    model.graph.output.add().CopyFrom(
        onnx.helper.make_tensor_value_info("selected", 7, None))
    if not constant:  # the optional inputs are int64/float graph inputs
        for value in model.graph.input:
            if value.name == "max_boxes_in":
                value.type.tensor_type.elem_type = 7
    return model


def _checks(report, node_name):
    return {f.check: f.severity for n in report.nodes if n.name == node_name for f in n.findings}


def test_clean_conv_relu_is_supported_with_ir_types():
    report = check_model(conv_relu(), target="Ascend310B4")
    assert report.ok and not report.model_findings
    assert {n.name: n.ir_type for n in report.nodes} == {"conv": "PartitionedCall", "relu": "Relu"}
    assert "supported: 0 of 2 nodes unsupported" in report.render()


def test_constant_nodes_are_handled_by_the_parser_itself():
    model = make_model(
        [node("Constant", [], ["k"], name="k", value=onnx.numpy_helper.from_array(
            np.ones((1, 3, 4, 4), np.float32))),
         node("Add", ["x", "k"], ["y"], name="add")],
        {"x": [1, 3, 4, 4]}, ["y"], opset=18)
    assert check_model(model).ok


def test_nms_five_input_constant_form_compiles_with_warnings_only():
    report = check_model(_nms_model(5), target="Ascend310B4")
    assert report.ok
    assert _checks(report, "nms") == {"nms-padded-output": "warning"}


def test_nms_three_inputs_is_flagged():
    report = check_model(_nms_model(3), target="Ascend310B4")
    checks = _checks(report, "nms")
    assert checks["nms-five-input-form"] == "warning"
    assert "nms-needs-max-output" not in checks


def test_nms_without_max_output_is_an_error():
    report = check_model(_nms_model(2), target="Ascend310B4")
    assert not report.ok
    assert _checks(report, "nms")["nms-needs-max-output"] == "error"


def test_nms_with_computed_thresholds_is_an_error():
    report = check_model(_nms_model(5, constant=False), target="Ascend310B4")
    assert _checks(report, "nms")["nms-constant-thresholds"] == "error"
    assert "nms (NonMaxSuppression)" in [subject for subject, _ in report.errors]


def test_nms_soc_specific_and_value_restrictions():
    assert "nms-fp16-boxes" in _checks(check_model(_nms_model(5), target="Ascend310"), "nms")
    assert "nms-fp16-boxes" not in _checks(check_model(_nms_model(5), target="Ascend310B4"), "nms")
    big = check_model(_nms_model(5, max_boxes=1000), target="Ascend310B4")
    assert _checks(big, "nms")["nms-max-output-700"] == "warning"


def test_op_missing_from_the_table():
    model = make_model([node("Relu", ["x"], ["r"], name="relu"),
                        node("Gelu", ["r"], ["y"], name="gelu")], {"x": [1, 4]}, ["y"], opset=20)
    report = check_model(model)
    assert _checks(report, "gelu") == {"unknown-op": "error"}
    assert ("model", "opset-beyond-parser") in [(s, f.check) for s, f in report.model_findings]


def test_op_outside_its_opset_range():
    model = make_model([node("HardSwish", ["x"], ["y"], name="hs")], {"x": [1, 4]}, ["y"],
                       opset=14, check=False)
    model.opset_import[0].version = 11  # HardSwish is registered from 14
    findings = [f for n in check_model(model).nodes for f in n.findings]
    assert findings[0].check == "opset-out-of-range" and "opsets 14-18" in findings[0].message


def test_custom_domain_needs_a_registered_plugin_and_one_opset_import():
    model = make_model([node("Relu", ["x"], ["r"], name="relu"),
                        node("MyOp", ["r"], ["y"], name="mine", domain="my.ops")],
                       {"x": [1, 4]}, ["y"], extra_opsets={"my.ops": 1}, check=False)
    report = check_model(model)
    assert _checks(report, "mine") == {"custom-domain": "error"}
    assert "several-opset-imports" in [f.check for _, f in report.model_findings]
    with_plugin = check_model(model, plugins={"my.ops::1::MyOp"})
    assert _checks(with_plugin, "mine") == {}
    assert not with_plugin.ok  # the parser still cannot place the default-domain Relu (E16005)


def test_dynamic_dims_need_gears():
    model = conv_relu(batch="N")
    report = check_model(model)
    assert [(s, f.check) for s, f in report.model_findings] == [("input x", "dynamic-input")]
    assert check_model(model, gear_dims={"x": (0,)}).ok


def test_every_error_is_listed_once_with_its_subject():
    model = make_model([node("Foo", ["x"], ["a"], name="f1"), node("Foo", ["a"], ["b"], name="f2"),
                        node("Relu", ["b"], ["y"], name="r")], {"x": ["N", 4]}, ["y"], check=False)
    subjects = [subject for subject, _ in check_model(model).errors]
    assert subjects == ["input x", "f1 (Foo)", "f2 (Foo)"]


def test_table_integrity():
    table = load_table()
    used = {rid for entry in table.ops.values() for rid in entry.restrictions}
    assert used == set(table.restrictions) == set(PREDICATES)
    assert all(r.severity in ("error", "warning") for r in table.restrictions.values())
    assert table.ops["Upsample"].opsets == parse_ranges("8-9,11-16")
    squeeze = table.ops["Squeeze"]
    assert squeeze.ir_type(11) == "Squeeze" and squeeze.ir_type(13) == "SqueezeV3"
    assert table.ops["Constant"].supports(1) and table.ops["Constant"].supports(18)
    for check in ("unknown-op", "opset-out-of-range", "custom-domain", "several-opset-imports",
                  "dynamic-input", "opset-beyond-parser"):
        assert set(table.model_checks[check]) == {"message", "hint", "source"}


@pytest.mark.parametrize("text", ["8-18", "1,6,8-18", "11", "8-9,11-16"])
def test_ranges_round_trip(text):
    assert format_ranges(parse_ranges(text)) == text


def test_json_report_lists_every_node():
    data = check_model(conv_relu(), target="Ascend310B4").to_json()
    assert data["supported"] is True and data["target"] == "Ascend310B4"
    assert [n["name"] for n in data["nodes"]] == ["conv", "relu"]
