"""A recording that is not one, or whose meta a replay cannot read, is refused when loaded:
``error[bad-recording]`` naming the key, for ``verify --against`` and the pytest kit alike."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.reference.recording import load_recording, make_recording
from edgefuse.runtime import open_session
from edgefuse.testing import assert_replays
from tests.model_builders import conv_net

pytestmark = pytest.mark.unit

SAMPLE = ({"x": np.zeros((1, 3, 8, 8), np.float32)}, {"logits": np.zeros((1, 5), np.float32)})


@pytest.mark.parametrize(("meta", "message"), [
    ({"build": "abc"}, r"'build' in its meta is 'abc', not an object"),
    ({"build": ["abc"]}, r"'build' in its meta is \['abc'\], not an object"),
    ({"build": {"manifest_sha256": 12}}, r"build.manifest_sha256 in its meta must be text, got 12"),
    ({"backend": {"name": "cpu"}}, r"backend in its meta must be text"),
    ({"soc": 310}, r"soc in its meta must be text, got 310"),
])
def test_meta_of_the_wrong_type_is_refused_on_load(tmp_path, meta, message):
    make_recording([SAMPLE], {"backend": "cpu", **meta}).save(tmp_path / "r.npz")
    with pytest.raises(InputError, match=message) as caught:
        load_recording(tmp_path / "r.npz")
    assert caught.value.reference == "bad-recording"


def test_an_npy_is_not_a_recording(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(InputError, match=r"single array \(an \.npy\), not a recording"):
        load_recording(tmp_path / "x.npy")


@pytest.mark.ort
def test_the_pytest_kit_refuses_a_build_of_the_wrong_type(tmp_path):
    make_recording([SAMPLE], {"backend": "cpu", "build": "abc"}).save(tmp_path / "r.npz")
    with open_session(conv_net(), "cpu") as session, \
            pytest.raises(InputError, match=r"'build' in its meta is 'abc'"):
        assert_replays(session, tmp_path / "r.npz")
