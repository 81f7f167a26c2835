"""verify's default gate on the host emulation of INT8 (`quantize --int8 --emulate`): the build
spec's int8_min_cosine (0.99), not the FP32 gate every sound INT8 model misses; an FP32
candidate keeps the FP32 gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefuse.preprocess import Preprocess
from edgefuse.quantize.int8 import write_int8_calibration
from edgefuse.verify import DEFAULT_INT8_MIN_COSINE, DEFAULT_MIN_COSINE, verify
from tests.quantize.graphs import conv_net

pytestmark = pytest.mark.ort

PHOTOS = Path(__file__).parents[1] / "vision" / "photos"
STRETCH = Preprocess(size=(8, 8), resize="stretch", layout="NCHW", scale=1 / 255)


def test_the_int8_emulation_is_judged_at_the_int8_gate(tmp_path):
    written = write_int8_calibration(conv_net(), tmp_path / "q", inputs=PHOTOS,
                                     preprocess=STRETCH, emulate=True)
    result = verify(conv_net(), tmp_path / "q" / written.emulated, inputs=PHOTOS,
                    preprocess=STRETCH)
    worst = min(output.cosine for output in result.outputs)
    assert DEFAULT_INT8_MIN_COSINE == 0.99 and result.min_cosine == DEFAULT_INT8_MIN_COSINE
    assert DEFAULT_INT8_MIN_COSINE <= worst < DEFAULT_MIN_COSINE  # the FP32 gate fails INT8
    assert result.passed


def test_an_fp32_candidate_keeps_the_fp32_gate():
    result = verify(conv_net(), conv_net(), inputs=PHOTOS, preprocess=STRETCH)
    assert result.min_cosine == DEFAULT_MIN_COSINE
