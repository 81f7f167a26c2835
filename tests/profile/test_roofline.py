"""The board's floor against values worked out by hand from Ascend310B4's published peaks
(FP16 4 TFLOPS, INT8 8 TOPS on the Cube; LPDDR4X 3200 Mbps x 64 bit = 25.6 GB/s)."""

from __future__ import annotations

import pytest

from edgefuse.errors import InputError
from edgefuse.profile.roofline import node_floor
from edgefuse.profile.socs import SOC_PEAKS, soc_peaks

pytestmark = pytest.mark.unit

PEAKS = soc_peaks("Ascend310B4")


def test_the_published_figures_are_the_ones_in_the_table():
    assert PEAKS.cube_flops == {"fp16": 4e12, "int8": 8e12}
    assert PEAKS.memory_bytes_per_s == 25.6e9
    assert PEAKS.vector_flops is None  # not published: no guessed figure
    assert all("hiascend.com" in source for source in PEAKS.sources)


def test_a_big_conv_is_bound_by_the_cube():
    # 4 GFLOP at 4 TFLOPS = 1 ms; 1 MB of FP32 moved as FP16 = 0.5 MB at 25.6 GB/s = 19.53 us
    floor = node_floor(PEAKS, flops=4_000_000_000, bytes_moved=1_000_000, unit="cube")
    assert floor.seconds == pytest.approx(1e-3)
    assert floor.memory_seconds == pytest.approx(0.5e6 / 25.6e9)
    assert not floor.memory_bound


def test_a_vector_op_is_bound_by_memory_alone_when_the_vector_peak_is_unpublished():
    # 8 MB FP32 -> 4 MB FP16 at 25.6 GB/s = 156.25 us; its FLOPs give no term
    floor = node_floor(PEAKS, flops=2_000_000, bytes_moved=8_000_000, unit="vector")
    assert floor.compute_seconds is None
    assert floor.seconds == pytest.approx(156.25e-6)
    assert floor.memory_bound


def test_a_small_conv_with_big_weights_is_memory_bound():
    # 10 MFLOP = 2.5 us on the Cube; 4 MB FP32 -> 2 MB = 78.125 us
    floor = node_floor(PEAKS, flops=10_000_000, bytes_moved=4_000_000, unit="cube")
    assert floor.seconds == pytest.approx(78.125e-6)
    assert floor.memory_bound


def test_an_fp16_model_moves_its_bytes_as_they_are_and_int8_halves_them_again():
    fp16 = node_floor(PEAKS, flops=0, bytes_moved=2_560_000, unit="vector", float_itemsize=2)
    assert fp16.seconds == pytest.approx(100e-6)
    int8 = node_floor(PEAKS, flops=8_000_000_000, bytes_moved=4_000_000, unit="cube",
                      precision="int8")
    assert int8.compute_seconds == pytest.approx(1e-3)  # 8 GOP at 8 TOPS
    assert int8.memory_seconds == pytest.approx(1e6 / 25.6e9)


def test_uncounted_flops_leave_only_the_memory_term():
    floor = node_floor(PEAKS, flops=None, bytes_moved=25_600, unit="cube", float_itemsize=2)
    assert floor.seconds == pytest.approx(1e-6)


def test_an_unknown_soc_is_refused_with_the_known_names():
    with pytest.raises(InputError, match="unknown soc 'Ascend999'"):
        soc_peaks("Ascend999")


def test_a_known_soc_without_published_figures_is_left_out_not_guessed():
    assert "Ascend310P3" not in SOC_PEAKS
    with pytest.raises(InputError, match="no published peak figures for Ascend310P3") as error:
        soc_peaks("Ascend310P3")
    assert error.value.reference == "no-peak-figures"
