"""`--input NAME:D0,D1,...` parsing: good specs, and every malformed one rejected by message."""

import pytest

from edgefuse.convert.input_spec import (
    normalize_shapes,
    parse_input_spec,
    parse_input_specs,
    resolve_unnamed,
)
from edgefuse.errors import InputError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("images:1,3,224,224", ("images", (1, 3, 224, 224))),
        ("1,3,224,224", (None, (1, 3, 224, 224))),
        (" x : 2, 3 ", ("x", (2, 3))),
        ("input:0:1,3", ("input:0", (1, 3))),  # TensorFlow-style names keep their colon
        ("n:7", ("n", (7,))),
    ],
)
def test_valid_specs(text, expected):
    assert parse_input_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("x:", "a dimension is missing"),
        ("x:1,,3", "a dimension is missing"),
        (":1,3", "the name before ':' is empty"),
        ("x:1,three", "'three' is not an integer"),
        ("x:0,3", "dimension 0 is not positive"),
        ("x:-1,3", "dimension -1 is not positive"),
        ("x:1.5", "'1.5' is not an integer"),
    ],
)
def test_malformed_specs_are_rejected_with_the_text_and_reason(text, why):
    with pytest.raises(InputError, match=rf"bad input shape '{text}': {why}") as info:
        parse_input_spec(text)
    assert "NAME:D0,D1" in info.value.hint


def test_the_same_input_twice_is_rejected():
    with pytest.raises(InputError, match="input 'x' is given a shape twice"):
        parse_input_specs(["x:1,2", "x:1,3"])


def test_unnamed_shape_goes_to_the_only_input():
    assert resolve_unnamed({None: (1, 3)}, ["images"]) == {"images": (1, 3)}


def test_unnamed_shape_for_a_multi_input_model_asks_for_names():
    with pytest.raises(InputError, match="fits only a single-input model.*2 inputs: a, b") as info:
        resolve_unnamed({None: (1, 3)}, ["a", "b"])
    assert "--input a:... --input b:..." in info.value.hint


def test_api_shapes_accept_a_mapping_or_one_bare_shape():
    assert normalize_shapes({"x": [1, 2]}) == {"x": (1, 2)}
    assert normalize_shapes((1, 3, 8, 8)) == {None: (1, 3, 8, 8)}
    assert normalize_shapes(None) == {}


@pytest.mark.parametrize("bad", [{"x": "1,2"}, {"x": [1, 0]}, {"x": [1, True]}, {"": [1]}])
def test_api_shapes_reject_non_shapes(bad):
    with pytest.raises(InputError, match="bad input shape"):
        normalize_shapes(bad)
