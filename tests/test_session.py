"""Session.run validates names, dtypes and shapes before the backend sees them; close is final."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import EdgefuseError, InputError
from edgefuse.fallback.ort_session import OrtSession
from tests.model_builders import conv_net, two_input_model

pytestmark = pytest.mark.ort


@pytest.fixture
def session():
    with OrtSession(conv_net(), "cpu") as opened:
        yield opened


def _x(dtype=np.float32, shape=(1, 3, 8, 8)):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def test_specs_come_from_the_model():
    with OrtSession(two_input_model(), "cpu") as opened:
        assert [s.describe() for s in opened.inputs] == ["a: float32[N,4]", "b: float32[N,4]"]
        assert [s.name for s in opened.outputs] == ["y"]


def test_missing_input_is_named(session):
    with pytest.raises(InputError, match=r"missing input\(s\) 'x'") as caught:
        session.run({})
    assert "the model takes: x: float32[1,3,8,8]" in caught.value.context


def test_unknown_input_is_named(session):
    with pytest.raises(InputError, match=r"unknown input\(s\) 'z'"):
        session.run({"x": _x(), "z": _x()})


def test_wrong_dtype_names_expected_and_given(session):
    with pytest.raises(InputError,
                       match=r"input 'x' expects float32\[1,3,8,8\], got float64\[1,3,8,8\]"
                       ) as caught:
        session.run({"x": _x(np.float64)})
    assert "astype(numpy.float32)" in caught.value.hint


def test_wrong_shape_names_expected_and_given(session):
    with pytest.raises(InputError, match=r"expects float32\[1,3,8,8\], got float32\[1,3,9,8\]"):
        session.run({"x": _x(shape=(1, 3, 9, 8))})


def test_wrong_rank_hints_at_the_batch_dimension(session):
    with pytest.raises(InputError, match=r"got float32\[3,8,8\]") as caught:
        session.run({"x": _x(shape=(3, 8, 8))})
    assert "4-d array" in caught.value.hint


def test_non_array_feed_is_refused(session):
    with pytest.raises(InputError, match="input 'x' must be a numpy array, got list"):
        session.run({"x": _x().tolist()})


def test_feeds_must_be_a_mapping(session):
    with pytest.raises(InputError, match="feeds must be a dict"):
        session.run([_x()])


def test_dynamic_dimension_accepts_any_size():
    with OrtSession(two_input_model(), "cpu") as opened:
        for batch in (1, 3):
            a = np.ones((batch, 4), np.float32)
            assert opened.run({"a": a, "b": a})["y"].shape == (batch, 4)
        with pytest.raises(InputError, match=r"expects float32\[N,4\], got float32\[2,5\]"):
            opened.run({"a": np.ones((2, 5), np.float32), "b": np.ones((2, 5), np.float32)})


def test_validate_false_leaves_checking_to_the_backend():
    with OrtSession(conv_net(), "cpu", validate=False) as opened:
        with pytest.raises(Exception) as caught:  # noqa: B017 - whatever ONNX Runtime raises
            opened.run({"x": _x(np.float64)})
    assert type(caught.value).__module__.startswith("onnxruntime")


def test_closed_session_refuses_to_run_and_close_is_idempotent():
    opened = OrtSession(conv_net(), "cpu")
    with opened:
        opened.run({"x": _x()})
    assert opened.closed
    opened.close()
    with pytest.raises(EdgefuseError, match="cpu session is closed"):
        opened.run({"x": _x()})
