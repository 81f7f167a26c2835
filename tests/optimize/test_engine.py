"""The rule engine around the rules: recording, naming, selection, fixed point, report, I/O."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from edgefuse.errors import InputError
from edgefuse.optimize import optimize
from edgefuse.optimize._recording import RULE_TAG
from edgefuse.optimize.rules import ALL_RULES
from edgefuse.optimize.rules.fold_bn_into_conv import FoldBnIntoConv
from tests.optimize.graphs import (
    assert_same_outputs,
    bn_node,
    bn_params,
    make_model,
    node,
    op_types,
    optimize_only,
    random,
    rule_tags,
)

pytestmark = pytest.mark.ort


def conv_bn(*, conv_name="conv", bn_name="bn", extra_nodes=(), outputs=("y",), seed=0, **extra):
    rng = np.random.default_rng(seed)
    return make_model(
        [
            node("Conv", ["x", "w"], ["c"], name=conv_name),
            bn_node("c", "y", prefix=bn_name),
            *extra_nodes,
        ],
        {"x": [1, 2, 5, 5], **extra.pop("inputs", {})},
        list(outputs),
        {"w": random(rng, 3, 2, 3, 3), **bn_params(rng, 3, prefix=bn_name), **extra},
    )


# --- recording ---------------------------------------------------------------------------------


def test_onnxscript_still_words_other_uses_the_way_the_recorder_expects():
    model = conv_bn(extra_nodes=[node("Relu", ["c"], ["z"], name="relu")], outputs=("y", "z"))
    ir_model = ir.serde.deserialize_model(model)
    bn = next(n for n in ir_model.graph if n.op_type == "BatchNormalization")
    match = FoldBnIntoConv.rule().match(ir_model, ir_model.graph, bn)
    assert not match
    assert match.reason == "Matched nodes have other uses preventing replacement."
    stats = optimize_only(model, "fold-bn-into-conv").report.rules["fold-bn-into-conv"]
    assert stats.rejected == {"bn": "an intermediate value has consumers outside the pattern"}


def test_rejections_of_unnamed_nodes_are_counted_per_node():
    rng = np.random.default_rng(1)
    model = make_model(
        [
            node("Conv", ["x", "w1"], ["c1"]),
            node("BatchNormalization", ["c1", "s", "b", "m1", "v"], ["y1"]),
            node("Conv", ["x", "w2"], ["c2"]),
            node("BatchNormalization", ["c2", "s", "b", "m2", "v"], ["y2"]),
        ],
        {"x": [1, 2, 5, 5], "m1": [3], "m2": [3]},
        ["y1", "y2"],
        {
            "w1": random(rng, 3, 2, 3, 3),
            "w2": random(rng, 3, 2, 3, 3),
            **{name: random(rng, 3) for name in ("s", "b", "v")},
        },
    )
    stats = optimize_only(model, "fold-bn-into-conv").report.rules["fold-bn-into-conv"]
    assert stats.matched == 2
    assert sorted(stats.rejected.values()) == [
        "input_mean 'm1' is not constant (a graph input)",
        "input_mean 'm2' is not constant (a graph input)",
    ]


def test_a_rejection_seen_in_every_round_is_counted_once():
    """A no-op Reshape between Conv and BN takes a second round; the refused BN is seen twice."""
    rng = np.random.default_rng(2)
    params = bn_params(rng, 3, prefix="bn2")
    del params["bn2.mean"]
    model = make_model(
        [
            node("Conv", ["x", "w"], ["c"], name="conv"),
            node("Reshape", ["c", "same"], ["r"], name="noop"),
            bn_node("r", "y"),
            node("Conv", ["x", "w2"], ["c2"], name="conv2"),
            bn_node("c2", "y2", prefix="bn2"),
        ],
        {"x": [1, 2, 5, 5], "bn2.mean": [3]},
        ["y", "y2"],
        {
            "w": random(rng, 3, 2, 3, 3),
            "w2": random(rng, 3, 2, 3, 3),
            "same": np.array([0, 3, -1, 3], np.int64),
            **bn_params(rng, 3),
            **params,
        },
    )
    report = optimize(model).report
    assert report.rounds >= 2
    stats = report.rules["fold-bn-into-conv"]
    assert (stats.matched, stats.applied, list(stats.rejected)) == (2, 1, ["bn2"])


def test_new_nodes_carry_the_rule_tag_and_untouched_nodes_none():
    model = conv_bn(extra_nodes=[node("Relu", ["y"], ["z"], name="relu")], outputs=("z",))
    result = optimize(model)
    assert rule_tags(result.model) == {"conv": "fold-bn-into-conv"}
    assert RULE_TAG == "edgefuse.rule"


# --- naming ------------------------------------------------------------------------------------


def test_fused_node_keeps_the_conv_name_and_the_graph_output_keeps_its_name():
    model = conv_bn(conv_name="backbone.conv1", bn_name="backbone.bn1")
    result = optimize(model)
    (conv,) = result.model.graph.node
    assert (conv.name, list(conv.output)) == ("backbone.conv1", ["y"])
    assert [o.name for o in result.model.graph.output] == ["y"]
    assert {i.name for i in result.model.graph.initializer} == {
        "backbone.conv1.weight",
        "backbone.conv1.bias",
    }


def test_a_new_initializer_never_overwrites_an_existing_one_of_the_same_name():
    """The folded weight would be called 'conv1.weight': a name another Conv already reads."""
    rng = np.random.default_rng(3)
    other_weight = random(rng, 3, 2, 1, 1)
    model = make_model(
        [
            node("Conv", ["x", "w"], ["c"], name="conv1"),
            bn_node("c", "y"),
            node("Conv", ["x", "conv1.weight", "conv1.bias"], ["z"], name="other"),
        ],
        {"x": [1, 2, 5, 5]},
        ["y", "z"],
        {
            "w": random(rng, 3, 2, 3, 3),
            "conv1.weight": other_weight,
            "conv1.bias": random(rng, 3),
            **bn_params(rng, 3),
        },
    )
    result = optimize(model)
    assert op_types(result.model) == {"Conv": 2}
    names = [i.name for i in result.model.graph.initializer]
    assert len(names) == len(set(names)) == 4
    other = next(n for n in result.model.graph.node if n.name == "other")
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in result.model.graph.initializer}
    np.testing.assert_array_equal(initializers[other.input[1]], other_weight)
    assert_same_outputs(model, result.model)


def test_names_from_several_new_nodes_follow_the_matched_nodes():
    """A merged Unsqueeze keeps a matched Unsqueeze's name, not a synthesized one."""
    model = make_model(
        [
            node("Unsqueeze", ["x", "a1"], ["mid"], name="u1"),
            node("Unsqueeze", ["mid", "a2"], ["y"], name="u2"),
        ],
        {"x": [3, 4]},
        ["y"],
        {"a1": np.array([0], np.int64), "a2": np.array([2], np.int64)},
    )
    (merged,) = optimize(model).model.graph.node
    assert merged.name in {"u1", "u2"}


# --- selection ---------------------------------------------------------------------------------


def test_only_runs_just_the_named_rules():
    report = optimize_only(conv_bn(), "fold-bn-into-conv").report
    assert list(report.rules) == ["fold-bn-into-conv"]


def test_skip_leaves_the_fold_to_the_other_rules():
    """Without fold-bn-into-conv the BN becomes Mul/Add, which then fold into the Conv anyway."""
    model = conv_bn()
    result = optimize(model, skip=["fold-bn-into-conv"])
    assert "fold-bn-into-conv" not in result.report.rules
    applied = {rid: s.applied for rid, s in result.report.rules.items() if s.applied}
    assert applied == {"bn-to-affine": 1, "fold-mul-into-conv": 1, "fold-add-into-conv": 1}
    assert op_types(result.model) == {"Conv": 1}
    assert_same_outputs(model, result.model)


@pytest.mark.parametrize("selection", [{"only": ["fold-bn-into-cnov"]}, {"skip": ["no-such-rule"]}])
def test_an_unknown_rule_id_is_a_user_error(selection):
    with pytest.raises(InputError, match="unknown rule id"):
        optimize(conv_bn(), **selection)


def test_an_unknown_target_is_a_user_error():
    with pytest.raises(InputError, match="unknown optimize target 'npu'"):
        optimize(conv_bn(), target="npu")


# --- fixed point -------------------------------------------------------------------------------


def conv_between_bn(middle: onnx.NodeProto, **initializers):
    rng = np.random.default_rng(4)
    return make_model(
        [node("Conv", ["x", "w", "b"], ["c"], name="conv"), middle, bn_node("m", "y")],
        {"x": [1, 2, 5, 5]},
        ["y"],
        {"w": random(rng, 3, 2, 3, 3), "b": random(rng, 3), **bn_params(rng, 3), **initializers},
    )


def test_a_dropout_between_conv_and_bn_folds_into_the_conv():
    """The folder turns the Dropout into Identity but leaves it reading the Conv output."""
    model = conv_between_bn(node("Dropout", ["c"], ["m"], name="drop"))
    result = optimize(model)
    assert op_types(result.model) == {"Conv": 1}
    applied = {rid: s.applied for rid, s in result.report.rules.items() if s.matched}
    assert applied == {"fold-bn-into-conv": 1}
    assert_same_outputs(model, result.model)


def test_a_fold_that_needs_a_second_round_happens():
    """remove-noop-reshape leaves an Identity in round 1; the BN folds in round 2."""
    same = np.array([0, 3, -1, 3], np.int64)
    model = conv_between_bn(node("Reshape", ["c", "same"], ["m"], name="noop"), same=same)
    result = optimize(model)
    assert op_types(result.model) == {"Conv": 1}
    applied = {rid: s.applied for rid, s in result.report.rules.items() if s.applied}
    assert applied == {"remove-noop-reshape": 1, "fold-bn-into-conv": 1}
    assert result.report.rules["bn-to-affine"].rejected == {
        "bn": "'m' is an Identity of Conv 'conv': left to the BN folds once the Identity is removed"
    }
    rules_modified = [r.modified for r in result.report.passes if r.pass_id == "rewrite-rules"]
    assert rules_modified[:2] == [True, True]
    assert result.report.rounds == 3  # the third round finds nothing left to do
    assert_same_outputs(model, result.model)


def test_a_graph_with_nothing_to_do_ends_after_one_round_unchanged():
    model = make_model([node("Relu", ["x"], ["y"], name="relu")], {"x": [2, 3]}, ["y"])
    result = optimize(model)
    assert result.report.rounds == 1
    assert op_types(result.model) == {"Relu": 1}
    assert all(stats.matched == 0 for stats in result.report.rules.values())


# --- the input, the report and the files -------------------------------------------------------


def test_the_input_model_is_not_modified():
    model = conv_bn()
    before = model.SerializeToString()
    optimize(model)
    assert model.SerializeToString() == before


def test_report_json_has_the_documented_keys():
    model = conv_bn()
    model.graph.input.append(
        onnx.helper.make_tensor_value_info("bn.var", onnx.TensorProto.FLOAT, [3])
    )
    report = optimize(model).report.to_json()
    assert (report["nodes_before"], report["ops_before"]) == (
        2,
        {"BatchNormalization": 1, "Conv": 1},
    )
    assert (report["nodes_after"], report["ops_after"]) == (2, report["ops_before"])
    rules = {r["id"]: r for r in report["rules"]}
    assert set(rules) == {rule.id for rule in ALL_RULES}
    fold = rules["fold-bn-into-conv"]
    assert (fold["matched"], fold["applied"]) == (1, 0)
    assert fold["rejected"] == {"input_var 'bn.var' is not constant (a graph input)": 1}
    assert fold["rejected_nodes"] == {"bn": "input_var 'bn.var' is not constant (a graph input)"}
    assert json.loads(json.dumps(report)) == report


def test_render_lists_a_rejected_rule_with_its_reason():
    model = conv_bn(extra_nodes=[node("Relu", ["c"], ["z"], name="relu")], outputs=("y", "z"))
    text = optimize_only(model, "fold-bn-into-conv").report.render()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("fold-bn-into-conv")]
    assert line.split()[1:4] == ["1", "0", "1"]
    assert "1x an intermediate value has consumers outside the pattern" in line


def test_output_and_report_files_are_written(tmp_path):
    model = conv_bn()
    result = optimize(model, output=tmp_path / "out.onnx", report_path=tmp_path / "r.json")
    written = onnx.load(tmp_path / "out.onnx")
    assert written.SerializeToString() == result.model.SerializeToString()
    assert json.loads((tmp_path / "r.json").read_text())["nodes_after"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx", "r.json"]


def test_an_ir3_model_lists_its_initializers_as_inputs_and_still_folds():
    """Before IR 4 every initializer is also a graph input, which ONNX Runtime takes as constant."""
    model = conv_bn()
    model.ir_version = 3
    model.opset_import[0].version = 9
    for init in model.graph.initializer:
        model.graph.input.append(
            onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        )
    onnx.checker.check_model(model, full_check=True)
    result = optimize(model)
    assert op_types(result.model) == {"Conv": 1}
    assert [i.name for i in result.model.graph.input] == ["x"]
    assert result.model.ir_version == 4
    assert_same_outputs(model, result.model)


def test_render_says_so_when_no_rule_matched():
    text = optimize_only(conv_bn(), "fold-bn-into-gemm").report.render()
    assert "no rule matched: nothing left to fold or fuse" in text
    assert "why not" not in text
