"""The stand-in ``tbe`` itself: each bounds rule fails a kernel that breaks it and passes one that
keeps it, so that a green kernel test means the kernel kept every rule (see fake_tbe.py)."""

from __future__ import annotations

import pytest

from tests.acl.ops import fake_tbe
from tests.acl.ops.fake_tbe import StandInError

pytestmark = pytest.mark.standin


@pytest.fixture
def tik(monkeypatch):
    fake_tbe.install(monkeypatch)
    return fake_tbe.Tik()


def ub(tik, count, dtype="float16", name="buf"):
    return tik.Tensor(dtype, (count,), name=name, scope="ubuf")


def gm(tik, shape, dtype="float16", name="gm"):
    return tik.Tensor(dtype, tuple(shape), name=name, scope="gm")


# ---- element indices ------------------------------------------------------------------------


def test_a_constant_index_past_its_dimension_fails(tik):
    rows = tik.Tensor("float16", (3, 64), name="rows", scope="ubuf")
    rows[2, 63]  # the last element is fine
    with pytest.raises(StandInError, match=r"index 1 of rows\[3, 64\] spans \[10000000"):
        rows[0, 10**7]
    with pytest.raises(StandInError, match="index 0 of rows"):
        rows[3, 0]


def test_a_loop_index_is_checked_over_its_whole_range(tik):
    small = ub(tik, 16)
    tik.vec_dup(16, small, 0, 1, 8)
    with tik.for_range(0, 16) as i:
        small[i].set_as(1.0)
    with tik.for_range(0, 17) as i, pytest.raises(StandInError, match=r"spans \[0, 16\]"):
        small[i].set_as(1.0)


def test_an_if_scope_narrows_the_index_it_compares(tik):
    small = ub(tik, 16)
    with tik.for_range(0, 32) as i:
        channel = i * 1 + 0
        with tik.if_scope(channel < 16):
            small[channel].set_as(0.0)
        with tik.if_scope(fake_tbe._all(channel >= 0, channel < 17)):
            with pytest.raises(StandInError, match="out of bounds"):
                small[channel].set_as(0.0)


def test_a_loop_carried_increment_grows_by_the_trip_count(monkeypatch):
    fake_tbe.install(monkeypatch)

    def kernel(guard):
        tik = fake_tbe.Tik()
        out = ub(tik, 64, "int32", "out")
        tik.vec_dup(64, out, 0, 1, 8)
        count = tik.Scalar("int32", name="count", init_value=0)
        with tik.for_range(0, 100):
            if guard:
                with tik.if_scope(count < 64):
                    out[count].set_as(1)
            else:
                out[count].set_as(1)  # read before the increment: only the 2nd build sees 99
            count.set_as(count + 1)
        return tik

    fake_tbe.run(kernel, True)
    with pytest.raises(StandInError, match=r"spans \[0, 100\]"):
        fake_tbe.run(kernel, False)


# ---- vector instructions ----------------------------------------------------------------------


def test_repeats_times_repeat_stride_must_stay_inside_the_tensor(tik):
    buf = ub(tik, 1024)
    tik.vec_dup(128, buf, 0, 8, 8)  # 8 repeats x 128 lanes = exactly 1024
    with pytest.raises(StandInError, match=r"write of bytes \[0, 2304\) of buf"):
        tik.vec_dup(128, buf, 0, 9, 8)
    with pytest.raises(StandInError, match="out of bounds"):
        tik.vec_dup(128, buf[128], 0, 8, 8)  # the same repeats from an offset


def test_swapped_conversion_strides_read_past_the_source(tik):
    """float16 -> float32: 64 lanes are 4 blocks of source and 8 of destination per repeat."""
    source, widened = ub(tik, 1024, "float16", "src"), ub(tik, 1024, "float32", "dst")
    tik.vec_dup(128, source, 0, 8, 8)
    tik.vec_conv(64, "", widened, source, 16, 8, 4)
    with pytest.raises(StandInError, match="read of bytes .* of src"):
        tik.vec_conv(64, "", widened, source, 16, 4, 8)


def test_block_strides_count_towards_the_extent(tik):
    rows, acc, weights = ub(tik, 16 * 16, name="rows"), ub(tik, 128, name="acc"), ub(tik, 16)
    for buf in (rows, acc, weights):
        tik.vec_dup(16, buf, 0, 1, 0)
    tik.vec_dup(128, rows, 0, 2, 8)
    tik.vmla(128, acc, rows, weights, 1, 1, 2, 0, 8, 16, 0)  # 8 blocks, stride 2: 15 blocks
    with pytest.raises(StandInError, match="of rows"):
        tik.vmla(128, acc, rows, weights, 1, 1, 3, 0, 8, 24, 0)  # stride 3: 22 blocks


def test_a_ub_operand_must_start_on_a_block(tik):
    buf = ub(tik, 256)
    tik.vec_dup(128, buf[16], 0, 1, 8)
    with pytest.raises(StandInError, match="not on a 32-byte block"):
        tik.vec_dup(64, buf[8], 0, 1, 8)


def test_reading_a_ub_tensor_nothing_wrote_fails(tik):
    written, fresh, out = ub(tik, 128, name="written"), ub(tik, 128, name="fresh"), ub(tik, 128)
    tik.vec_dup(128, written, 1.0, 1, 8)
    tik.vec_add(128, out, written, written, 1, 8, 8, 8)
    with pytest.raises(StandInError, match="read of UB tensor fresh before"):
        tik.vec_add(128, out, written, fresh, 1, 8, 8, 8)
    with pytest.raises(StandInError, match="read of UB tensor fresh before"):
        tik.Scalar("float16").set_as(fresh[0])


def test_a_reduction_index_read_back_is_bounded_by_the_elements_reduced(tik):
    scores, work, out = ub(tik, 640, "float32"), ub(tik, 640, "float32"), ub(tik, 64, "float32")
    tik.vec_dup(64, scores, 0.0, 10, 8)
    tik.vec_reduce_max(64, out, scores, work, 10, 8, cal_index=True)
    at = tik.Scalar("uint32")
    at.set_as(out.reinterpret_cast_to("uint32")[1])
    assert at.bounds == (0, 639)
    scores[at].set_as(-1.0)
    with pytest.raises(StandInError, match="work"):
        tik.vec_reduce_max(64, out, scores, ub(tik, 16, "float32", "work"), 10, 8)


# ---- data_move --------------------------------------------------------------------------------


def test_bursts_and_gaps_must_stay_inside_both_tensors(tik):
    src, dst = gm(tik, (4, 64)), ub(tik, 256, name="dst")
    tik.data_move(dst, src, 0, 4, 4, 0, 0)  # 4 bursts of 4 blocks: the whole tensor
    tik.data_move(dst, src, 0, 2, 2, 2, 0)  # every other row of 2 blocks
    with pytest.raises(StandInError, match="read of bytes .* of gm"):
        tik.data_move(dst, src, 0, 2, 2, 13, 0)  # the second burst ends past the end
    with pytest.raises(StandInError, match="write of bytes .* of dst"):
        tik.data_move(dst, src, 0, 4, 2, 0, 3)


def test_a_burst_past_a_gm_tensor_fails_even_inside_its_last_block(tik):
    weights, staging = gm(tik, (9 * 24,), name="w_gm"), ub(tik, 224, name="w")
    tik.data_move(staging, weights, 0, 1, 13, 0, 0)  # 208 of the 216 elements
    with pytest.raises(StandInError, match=r"read of bytes \[0, 448\) of w_gm"):
        tik.data_move(staging, weights, 0, 1, 14, 0, 0)  # 224: 8 past the end


def test_a_gm_tensor_smaller_than_a_block_is_written_only_by_read_modify_write(tik):
    counts, staging = gm(tik, (1,), "int32", "num_gm"), ub(tik, 16, "int32", "counts")
    tik.vec_dup(16, staging, 0, 1, 8)
    with pytest.raises(StandInError, match=r"write past the end of num_gm .*read-modify-write"):
        tik.data_move(counts, staging, 0, 1, 1, 0, 0)
    block = ub(tik, 16, "int32", "block")
    tik.data_move(block, counts, 0, 1, 1, 0, 0)  # the block as it is, bytes past the end too
    block[0].set_as(staging[0])
    tik.data_move(counts, block, 0, 1, 1, 0, 0)
    tik.BuildCCE("k", [counts], [])  # the read past the end served that write
    with pytest.raises(StandInError, match="num_gm"):
        tik.data_move(counts, block, 0, 1, 2, 0, 0)  # more than the one covering block


def test_a_short_gm_tensor_is_read_element_wise_where_the_chip_can(monkeypatch):
    bias = {}
    for soc in ("Ascend310B4", "Ascend310"):
        fake_tbe.install(monkeypatch, soc)
        tik = fake_tbe.Tik()
        bias[soc] = (tik, gm(tik, (8,), "float16", "bias_gm"), ub(tik, 16, "float16", "bias"))
        tik_, src, dst = bias[soc]
        tik_.data_move(dst, src, 0, 1, 1, 0, 0)  # the covering block: past the 16 bytes
        if soc == "Ascend310B4":
            with pytest.raises(StandInError, match=r"read past the end of bias_gm .*element by"):
                tik_.BuildCCE("k", [src], [])
            value = tik_.Scalar("float16")
            value.set_as(src[3])  # what it should do there
        else:
            tik_.BuildCCE("k", [src], [])  # the only way on Ascend310
            with pytest.raises(StandInError, match="Scalar.set_as from GM tensor bias_gm"):
                tik_.Scalar("float16").set_as(src[3])


# ---- what the chip supports ---------------------------------------------------------------------


@pytest.mark.parametrize(("soc", "fails"),
                         [("Ascend310B4", False), ("Ascend310", True), ("Ascend910A", True)])
def test_vec_sel_mode_2_and_float32_reductions_need_a_newer_chip(monkeypatch, soc, fails):
    fake_tbe.install(monkeypatch, soc)
    tik = fake_tbe.Tik()
    a, b, mask = ub(tik, 64, "float32", "a"), ub(tik, 64, "float32", "b"), ub(tik, 8, "uint16")
    for buf in (a, b, mask):
        tik.vec_dup(8 if buf is mask else 64, buf, 0, 1, 8)
    work = ub(tik, 64, "float32", "work")
    calls = (lambda: tik.vec_sel(64, 2, a, mask, a, b, 1, 8, 8, 8),
             lambda: tik.vec_reduce_max(64, b, a, work, 1, 8, cal_index=True))
    for call in calls:
        if fails:
            with pytest.raises(StandInError, match=f"not supported on {soc}"):
                call()
        else:
            call()


def test_float32_vexp_is_missing_on_ascend310(monkeypatch):
    fake_tbe.install(monkeypatch, "Ascend310")
    import tbe.common.platform as platform  # the stand-in, installed above
    import tbe.dsl as dsl

    assert not platform.api_check_support("tbe.dsl.vexp", "float32")
    assert platform.api_check_support("tbe.dsl.vexp", "float16")
    dsl.vexp(fake_tbe._Compute("float16"))
    with pytest.raises(StandInError, match="vexp on float32 is not supported on Ascend310"):
        dsl.vexp(fake_tbe._Compute("float32"))
