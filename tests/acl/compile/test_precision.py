"""Precision decisions -> keep_dtype.cfg (node names, one per line) and the mix list JSON."""

import json

import numpy as np
import pytest

from edgefuse.acl.compile.precision import (
    KeepFp32,
    origin_dtype_warning,
    plan_precision,
    read_keep_fp32,
)
from edgefuse.errors import InputError
from tests.acl.models import make_model, node

pytestmark = pytest.mark.unit


def _model():
    return make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv"),
         node("Softmax", ["c"], ["s"], name="softmax_a", axis=1),
         node("Softmax", ["s"], ["t"], name="softmax_b", axis=1),
         node("Sigmoid", ["t"], ["y"], name="head/sigmoid")],
        {"x": [1, 3, 4, 4]}, ["y"], {"w": np.ones((2, 3, 1, 1), np.float32)}, opset=11)


def test_report_shape_is_read(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"keep_fp32": {"nodes": ["a"], "op_types": ["Softmax"]},
                                "layers": []}))
    assert read_keep_fp32(path) == KeepFp32(("a",), ("Softmax",))


@pytest.mark.parametrize("content", ['{"nodes": []}', '{"keep_fp32": {"nodes": "a"}}', "not json"])
def test_bad_reports_are_refused(tmp_path, content):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(InputError):
        read_keep_fp32(path)


def test_force_fp16_keeps_nodes_and_op_types_by_name():
    plan = plan_precision(_model(), "force_fp16", KeepFp32(("head/sigmoid",), ("Softmax",)))
    assert plan.keep_dtype_text == "head/sigmoid\nsoftmax_a\nsoftmax_b\n"
    assert plan.mixlist is None
    assert plan.decisions["keep_dtype_nodes"] == ["head/sigmoid", "softmax_a", "softmax_b"]


def test_mixed_precision_black_lists_ir_types_that_map_one_to_one():
    plan = plan_precision(_model(), "allow_mix_precision", KeepFp32((), ("Softmax", "Conv")))
    assert plan.mixlist == {"black-list": {"to-add": ["SoftmaxV2"]}}  # Conv is a subgraph
    assert "conv" in plan.keep_dtype_text.split()


def test_only_must_keep_origin_dtype_ignores_the_keep_list():
    plan = plan_precision(_model(), "must_keep_origin_dtype", KeepFp32(("conv",)))
    assert plan.keep_dtype_text is None and plan.mixlist is None
    assert "ATC ignores --keep_dtype there" in plan.decisions["notes"][0]
    for mode in ("force_fp32", "cube_fp16in_fp32out"):  # ATC applies --keep_dtype under these
        assert plan_precision(_model(), mode, KeepFp32(("conv",))).keep_dtype_text == "conv\n"


@pytest.mark.parametrize(("soc", "mode", "warned"), [
    ("ascend310b", "must_keep_origin_dtype", True),
    ("ascend310", "must_keep_origin_dtype", True),
    ("ascend310p", "must_keep_origin_dtype", False),
    ("ascend310b", "force_fp16", False),
])
def test_must_keep_origin_dtype_on_a_float16_cube_is_warned_about(soc, mode, warned):
    warning = origin_dtype_warning(_model(), mode, soc)
    assert (warning is not None) == warned
    if warned:
        assert "keeps 1 float32 convolution/matrix node(s)" in warning
        assert "AI CPU" in warning and "force_fp16" in warning


def test_unknown_node_names_are_refused():
    with pytest.raises(InputError, match="1 nodes the prepared model does not have") as exc:
        plan_precision(_model(), "force_fp16", KeepFp32(("missing",)))
    assert "missing" in exc.value.context


def test_nothing_to_keep_writes_nothing():
    plan = plan_precision(_model(), "force_fp16", KeepFp32())
    assert plan.keep_dtype_text is None and plan.mixlist is None
