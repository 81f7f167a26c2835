"""Preparing ONNX for ATC: opset choice by the parser table, own down-conversion, gears, domains,
and the ONNX Runtime parity gate (every check compares against the original model's outputs)."""

import numpy as np
import onnx
import pytest

from edgefuse.acl._downgrade import DowngradeError, downgrade
from edgefuse.acl.prepare import make_gears, prepare_for_atc
from edgefuse.errors import InputError
from edgefuse.verify import random_feeds, run_onnx
from tests.unit.ascend.models import conv_relu, make_model, node


def _same_outputs(a, b, shapes=None):
    feeds = random_feeds(a if shapes is None else shapes, seed=5)
    ra, rb = run_onnx(a, feeds), run_onnx(b, feeds)
    for name in ra:
        np.testing.assert_allclose(ra[name], rb[name], rtol=1e-5, atol=1e-5)


def _opset(model):
    return next(e.version for e in model.opset_import if e.domain == "")


def _head(opset):
    """Conv -> Relu -> Resize(x2, roi omitted) -> ReduceMean(axes) -> Softmax(last) at ``opset``."""
    rng = np.random.default_rng(0)
    init = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "scales": np.array([1, 1, 2, 2], np.float32)}
    reduce_mean = node("ReduceMean", ["u"], ["m"], name="mean", axes=[3], keepdims=1)
    if opset >= 18:
        init["axes"] = np.array([3], np.int64)
        reduce_mean = node("ReduceMean", ["u", "axes"], ["m"], name="mean", keepdims=1)
    return make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         node("Relu", ["c"], ["r"], name="relu"),
         node("Resize", ["r", "", "scales"], ["u"], name="up", mode="nearest"),
         reduce_mean,
         node("Softmax", ["m"], ["y"], name="soft", axis=-1)],
        {"x": [1, 3, 8, 8]}, ["y"], init, opset=opset)


def test_opset_18_head_is_brought_down_to_11_with_identical_outputs():
    original = _head(18)
    prepared = prepare_for_atc(original)
    assert prepared.opset == 11 and _opset(prepared.model) == 11
    assert prepared.changes == ["converted opset 18 -> 11"]
    assert prepared.parity["checked"] and prepared.parity["min_cosine"] >= 0.99999
    _same_outputs(original, prepared.model)
    resize = next(n for n in prepared.model.graph.node if n.op_type == "Resize")
    assert resize.input[1]  # Resize-11 needs its roi input: an empty tensor was added
    mean = next(n for n in prepared.model.graph.node if n.op_type == "ReduceMean")
    assert list(mean.input) == ["u"] and [a.ints for a in mean.attribute if a.name == "axes"]


def test_an_op_registered_only_at_a_higher_opset_picks_the_lowest_that_works():
    original = make_model([node("HardSwish", ["x"], ["h"], name="hs"),
                           node("Relu", ["h"], ["y"], name="relu")], {"x": [1, 8]}, ["y"], opset=17)
    prepared = prepare_for_atc(original)
    assert prepared.opset == 14
    assert "11 (HardSwish not registered)" in prepared.changes[0]
    _same_outputs(original, prepared.model)


def test_model_already_at_the_target_is_left_alone_and_still_verified():
    prepared = prepare_for_atc(conv_relu(opset=11))
    assert prepared.opset == 11 and prepared.changes == []
    assert prepared.parity["outputs"] == {"y": pytest.approx(1.0)}


def test_old_models_are_upgraded_to_the_target():
    original = conv_relu(opset=9)
    prepared = prepare_for_atc(original)
    assert prepared.opset == 11 and prepared.changes == ["converted opset 9 -> 11"]
    _same_outputs(original, prepared.model)


def test_softmax_on_an_inner_axis_cannot_go_below_13():
    model = make_model([node("Softmax", ["x"], ["y"], name="soft", axis=1)],
                       {"x": [1, 4, 5]}, ["y"], opset=13)
    with pytest.raises(DowngradeError, match="reduces axis 1"):
        downgrade(model, 12)
    prepared = prepare_for_atc(model)
    assert prepared.opset == 13 and "reduces axis 1" in prepared.changes[0]


def test_split_and_squeeze_inputs_become_attributes():
    model = make_model(
        [node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=1),
         node("Unsqueeze", ["a", "ax"], ["a1"], name="unsq"),
         node("Squeeze", ["a1", "ax"], ["a2"], name="sq"),
         node("Add", ["a2", "b"], ["y"], name="add")],
        {"x": [2, 6]}, ["y"], {"sizes": np.array([3, 3], np.int64), "ax": np.array([0], np.int64)},
        opset=13)
    lowered = downgrade(model, 11)
    split = lowered.graph.node[0]
    assert list(split.input) == ["x"] and list(split.attribute[-1].ints) == [3, 3]
    _same_outputs(model, lowered)


def test_attributes_that_change_meaning_are_refused():
    model = make_model([node("Reshape", ["x", "shape"], ["y"], name="reshape", allowzero=1)],
                       {"x": [2, 3]}, ["y"], {"shape": np.array([3, 2], np.int64)}, opset=14)
    with pytest.raises(DowngradeError, match="allowzero=1"):
        downgrade(model, 13)
    model.graph.node[0].attribute[0].i = 0
    assert downgrade(model, 13).graph.node[0].attribute == []


def test_mmdeploy_style_custom_domain_is_moved_to_the_registered_default_domain():
    model = make_model(
        [node("Relu", ["boxes"], ["b"], name="relu"),
         node("BatchMultiClassNMS", ["b", "scores"], ["dets", "labels"], name="nms",
              domain="mmdeploy")],
        {"boxes": [1, 10, 1, 4], "scores": [1, 10, 2]}, ["dets", "labels"],
        opset=11, extra_opsets={"mmdeploy": 1, "ai.onnx.ml": 3}, check=False)
    prepared = prepare_for_atc(model)
    assert [e.domain for e in prepared.model.opset_import] == [""]
    assert prepared.model.graph.node[1].domain == ""
    assert any("mmdeploy::BatchMultiClassNMS" in c for c in prepared.changes)
    assert any("dropped unused opset_import" in c for c in prepared.changes)
    assert prepared.parity["checked"] is False  # ONNX Runtime cannot run the mmdeploy op
    assert "cannot run the original" in prepared.parity["reason"]


def test_batch_gears_relax_the_batch_and_every_gear_runs():
    original = conv_relu(opset=11)
    gears = make_gears(original, dynamic_batch=[1, 2, 4])
    assert gears.dims == {"x": (0,)} and [g["x"] for g in gears.shapes] == [
        (1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8)]
    prepared = prepare_for_atc(original, gears=gears)
    dims = prepared.model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "x_dim0" and [d.dim_value for d in dims[1:]] == [3, 8, 8]
    assert prepared.parity["checked"]


def test_a_batch_baked_into_the_graph_fails_the_gear_check():
    baked = make_model(
        [node("Relu", ["x"], ["r"], name="relu"),
         node("Reshape", ["r", "shape"], ["y"], name="flatten")],
        {"x": [1, 3, 2, 2]}, ["y"], {"shape": np.array([1, 12], np.int64)})
    gears = make_gears(baked, dynamic_batch=[1, 4])
    with pytest.raises(InputError, match="does not run at gear shape") as exc:
        prepare_for_atc(baked, gears=gears)
    assert exc.value.reference == "gear-shape-fails"


def test_image_size_gears_relax_h_and_w():
    original = conv_relu(opset=11)
    gears = make_gears(original, dynamic_image_size=[(8, 8), (16, 24)])
    assert gears.dims == {"x": (2, 3)}
    prepared = prepare_for_atc(original, gears=gears)
    dims = prepared.model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == [1, 3, "x_dim2", "x_dim3"]


def test_a_converter_that_changes_the_math_is_caught(monkeypatch):
    import edgefuse.acl.prepare as prepare_module

    def wrong_downgrade(model, target):
        changed = downgrade(model, target)
        relu = next(n for n in changed.graph.node if n.op_type == "Relu")
        relu.op_type = "Sigmoid"  # a mis-translation
        return changed

    monkeypatch.setattr(prepare_module, "downgrade", wrong_downgrade)
    with pytest.raises(Exception, match="differs from the original"):
        prepare_for_atc(conv_relu(opset=13))


def test_downgrade_keeps_graph_valid():
    lowered = downgrade(_head(18), 11)
    onnx.checker.check_model(lowered, full_check=True)


def test_split_num_outputs_becomes_explicit_sizes_by_onnx_rounding():
    model = make_model([node("Split", ["x"], ["a", "b", "c"], name="split", axis=1, num_outputs=3),
                        node("Concat", ["c", "b", "a"], ["y"], name="cat", axis=1)],
                       {"x": [1, 7]}, ["y"], opset=18)
    for target in (11, 13):
        lowered = downgrade(model, target)
        _same_outputs(model, lowered)
    sizes = downgrade(model, 11).graph.node[0].attribute
    assert [list(a.ints) for a in sizes if a.name == "split"] == [[3, 3, 1]]
