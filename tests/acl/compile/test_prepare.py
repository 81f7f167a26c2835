"""Preparing ONNX for ATC: opset choice by the parser table, own down-conversion, gears, domains,
and the ONNX Runtime parity gate (every check compares against the original model's outputs)."""

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.prepare import make_gears, prepare_for_atc
from edgefuse.convert.opset_downgrade import DowngradeError, downgrade
from edgefuse.errors import InputError
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import run_onnx
from tests.acl.models import conv_relu, make_model, node

pytestmark = pytest.mark.ort


def _same_outputs(a, b, shapes=None):
    feeds = random_feeds(input_specs(a if shapes is None else shapes), seed=5)
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
    assert "axes" not in {init.name for init in prepared.model.graph.initializer}  # now unread


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


def _reshape(shape, allowzero):
    return make_model([node("Reshape", ["x", "shape"], ["y"], name="reshape", allowzero=allowzero)],
                      {"x": [2, 3]}, ["y"], {"shape": np.array(shape, np.int64)}, opset=14,
                      check=False)


def test_attributes_that_change_meaning_are_refused():
    # A 0 in the shape copies the input's dimension, unless allowzero=1: opset 13 cannot say that.
    with pytest.raises(DowngradeError, match="'reshape' .* sets allowzero=1"):
        downgrade(_reshape([0, 3], allowzero=1), 13)
    assert downgrade(_reshape([0, 3], allowzero=0), 13).graph.node[0].attribute == []


def test_allowzero_without_a_zero_in_a_constant_shape_is_dropped():
    # The dynamo exporter writes allowzero=1 on every Reshape; without a 0 it changes nothing.
    model = _reshape([3, 2], allowzero=1)
    lowered = downgrade(model, 11)
    assert lowered.graph.node[0].attribute == [] and _opset(lowered) == 11
    _same_outputs(model, lowered)


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


def test_a_model_with_edgefuse_swish_comes_down_to_11_like_any_other():
    # The Swish plugin registers ai.onnx::8..18::Swish, so the node passes through the
    # down-conversion as it is; its decomposition (a function that imports opset 18) goes.
    from edgefuse.acl.compile.compile import edgefuse_plugins  # noqa: PLC0415
    from edgefuse.acl.ops.host import attach_functions  # noqa: PLC0415

    rng = np.random.default_rng(1)
    model = attach_functions(make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         node("Swish", ["c"], ["y"], name="swish", domain="edgefuse")],
        {"x": [1, 3, 8, 8]}, ["y"], {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)},
        opset=18, extra_opsets={"edgefuse": 1}, check=False))
    for size in (1, 4, 8, 8):  # as the optimizer writes it; ONNX's checker needs output shapes
        model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = size
    assert [f.name for f in model.functions] == ["Swish"]

    prepared = prepare_for_atc(model, plugins=edgefuse_plugins())

    assert prepared.opset == 11 and [(e.domain, e.version) for e in prepared.model.opset_import] \
        == [("", 11)]
    assert [(n.op_type, n.domain) for n in prepared.model.graph.node] == [("Conv", ""),
                                                                         ("Swish", "")]
    assert not prepared.model.functions
    assert "dropped model-local functions no node calls: edgefuse::Swish" in prepared.changes
    assert prepared.parity["checked"] and prepared.parity["min_cosine"] >= 0.99999


def test_without_its_plugin_a_custom_op_keeps_the_model_at_its_opset():
    model = make_model([node("Relu", ["x"], ["r"], name="relu"),
                        node("Swish", ["r"], ["y"], name="swish")],
                       {"x": [1, 4]}, ["y"], opset=18, check=False)
    prepared = prepare_for_atc(model)
    assert prepared.opset == 18
    assert "no opset from 11 to 18 has every op registered" in prepared.changes[-1]


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
    import edgefuse.acl.compile.prepare as prepare_module

    def wrong_downgrade(model, target, opaque=()):
        changed = downgrade(model, target, opaque=opaque)
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
