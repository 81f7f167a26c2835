"""On the CPU, Session.run returns exactly what raw ONNX Runtime returns, on every catalogue model.

The raw session is built independently from the same ONNX bytes with the same options; any
difference (a copy through the wrong dtype, a layout change, an extra pass) shows as a bit
mismatch. Tiny variants keep it fast; every architecture and output layout is covered.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import edgefuse
from edgefuse.models import CATALOGUE
from tests.needs import optional

pytestmark = [pytest.mark.torch, pytest.mark.ort]

optional("torch")


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_cpu_session_is_bitwise_raw_onnxruntime(name):
    entry = CATALOGUE[name]
    model = edgefuse.convert(entry.build("tiny"), inputs={"input": entry.tiny_input_shape})
    feed = np.random.default_rng(3).standard_normal(entry.tiny_input_shape).astype(np.float32)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    raw = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    expected = dict(zip([o.name for o in raw.get_outputs()], raw.run(None, {"input": feed}),
                        strict=True))

    with edgefuse.open_session(model, backends=("cpu",), threads=1) as session:
        assert session.backend == "cpu"
        got = session.run({"input": feed})

    assert sorted(got) == sorted(expected)
    for output, value in expected.items():
        assert got[output].dtype == value.dtype and got[output].shape == value.shape
        assert np.array_equal(got[output], value), f"{name}: output {output} differs"
