"""Provenance: each node a rule builds names the original nodes it stands for, through chains of
rewrites, and what a rule removed outright is listed on the model (edgefuse.optimize.provenance).

Every positive rule test also checks the record (``assert_fired`` -> ``assert_provenance``);
these tests pin the exact lists."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.optimize import optimize, provenance
from tests.optimize.graphs import (
    bn_node,
    bn_params,
    make_model,
    node,
    random,
    rewrite_without_folding,
)

pytestmark = pytest.mark.ort


def _conv_bn_mul(rng):
    return make_model(
        [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
         bn_node("c", "b"),
         node("Mul", ["b", "scale"], ["m"], name="mul"),
         node("Relu", ["m"], ["y"], name="relu")],
        {"x": [1, 2, 5, 5]}, ["y"],
        {"w": random(rng, 3, 2, 3, 3), "scale": random(rng, 3, 1, 1), **bn_params(rng, 3)},
    )


def test_a_chain_of_folds_points_back_at_every_original_node_producers_first():
    result = optimize(_conv_bn_mul(np.random.default_rng(0)))
    (conv,) = [n for n in result.model.graph.node if n.op_type == "Conv"]
    assert conv.name == "conv"
    assert provenance.origins(conv) == ["conv", "bn", "mul"]
    assert provenance.rules(conv) == ["fold-bn-into-conv", "fold-mul-into-conv"]
    (relu,) = [n for n in result.model.graph.node if n.op_type == "Relu"]
    assert provenance.origins(relu) == ["relu"] and provenance.rules(relu) == []


def test_a_removed_node_is_listed_with_the_rule_that_removed_it():
    # (in the full pipeline the constant folder gets to a plain Dropout first: no rule to credit)
    model = make_model(
        [node("Relu", ["x"], ["r"], name="relu"),
         node("Dropout", ["r"], ["y"], name="drop")],
        {"x": [1, 4]}, ["y"])
    result = rewrite_without_folding(model, "remove-dropout")
    assert [n.op_type for n in result.model.graph.node] == ["Relu"]
    assert provenance.removed(result.model) == {"drop": "remove-dropout"}


def test_an_unnamed_node_is_recorded_as_the_report_names_it():
    rng = np.random.default_rng(1)
    model = make_model([node("Conv", ["x", "w"], ["c"]), bn_node("c", "y")],
                       {"x": [1, 2, 4, 4]}, ["y"],
                       {"w": random(rng, 3, 2, 1, 1), **bn_params(rng, 3)})
    result = optimize(model)
    (conv,) = result.model.graph.node
    assert provenance.origins(conv) == ["<unnamed Conv -> c>", "bn"]
