"""DVPP picture rules against hand-computed cases from the CANN pages the module cites, and the
DVPP letterbox against edgefuse.preprocess's (the CPU path's) geometry."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.acl.dvpp import geometry as g
from edgefuse.errors import InputError
from edgefuse.preprocess import letterbox as cpu_letterbox

pytestmark = pytest.mark.unit
B, P = "Ascend310B4", "Ascend310P3"


@pytest.mark.parametrize(("size", "soc", "unit", "stride", "nbytes"), [
    ((1920, 1080), B, "vpc_in", (1920, 1080), 3_110_400),
    ((1918, 1080), B, "vdec_out", (1918, 1080), 1918 * 1080 * 3 // 2),  # 310B: no alignment
    ((1918, 1080), P, "vpc_in", (1920, 1080), 3_110_400),  # 310P: width stride 16-aligned
    ((10, 6), P, "vpc_out", (32, 6), 288),  # 310P: width stride at least 32
    ((10, 6), B, "vpc_out", (10, 6), 90),
    ((1918, 1078), B, "jpegd_out", (1920, 1088), 3_133_440),  # JPEGD: 64 x 16 alignment
])
def test_picture_layout(size, soc, unit, stride, nbytes):
    pic = g.picture(*size, soc, unit)
    assert (pic.stride_w, pic.stride_h, pic.size) == (*stride, nbytes)
    g.check_picture(pic, soc, unit, buffer_size=nbytes)


def test_odd_sizes_are_refused():
    with pytest.raises(InputError, match="must be even"):
        g.check_picture(g.Picture(641, 480, 641, 480), B, "vpc_in")
    with pytest.raises(InputError, match="must be even"):
        g.check_picture(g.Picture(640, 481, 640, 482), B, "vpc_in")


def test_resolution_limits_per_soc():
    g.check_picture(g.picture(4096, 8192, B, "vpc_out"), B, "vpc_out")  # 200I/500 A2: 4096x8192
    with pytest.raises(InputError, match=r"outside 10x6\.\.4096x4096 on Ascend310P"):
        g.check_picture(g.picture(4096, 8192, P, "vpc_out"), P, "vpc_out")
    with pytest.raises(InputError, match=r"outside 10x6\.\.4096x8192"):
        g.check_picture(g.picture(4098, 2000, B, "vpc_out"), B, "vpc_out")
    with pytest.raises(InputError, match="outside"):
        g.check_picture(g.picture(8, 6, B, "vpc_in"), B, "vpc_in")
    with pytest.raises(InputError, match=r"outside 32x32"):
        g.check_picture(g.picture(30, 30, B, "jpegd_out"), B, "jpegd_out")


def test_strides():
    with pytest.raises(InputError, match="needs stride 1920x1080"):  # 310P: exactly aligned
        g.check_picture(g.Picture(1918, 1080, 1918, 1080), P, "vpc_in")
    g.check_picture(g.Picture(1918, 1080, 2048, 1088), B, "vpc_in")  # 310B: any that holds it
    with pytest.raises(InputError, match="needs stride"):
        g.check_picture(g.Picture(1918, 1080, 1916, 1080), B, "vpc_in")
    with pytest.raises(InputError, match="needs stride 1920x1088"):
        g.check_picture(g.Picture(1918, 1078, 1918, 1078), B, "jpegd_out")


def test_short_buffer_is_refused():
    pic = g.picture(640, 640, B, "vpc_out")
    with pytest.raises(InputError, match="buffer of 614399 bytes, needs 614400"):
        g.check_picture(pic, B, "vpc_out", buffer_size=614_399)


def test_channels_shared_by_vdec_and_jpegd():
    g.check_channel(127, B)
    with pytest.raises(InputError, match=r"outside \[0, 128\) on Ascend310B"):
        g.check_channel(128, B)
    g.check_channel(255, P)
    with pytest.raises(InputError, match="outside"):
        g.check_channel(-1, P)
    with pytest.raises(InputError, match="already created"):
        g.check_channel(3, B, {3})


def test_unknown_soc():
    with pytest.raises(InputError, match="no documented DVPP rules for SoC 'Ascend910B'"):
        g.rules_for("Ascend910B")


def _cpu(w, h, size=(640, 640)):
    return cpu_letterbox(np.zeros((h, w, 3), np.uint8), size)


@pytest.mark.parametrize(("w", "h"), [(1280, 720), (1920, 1080), (640, 480), (720, 1280)])
def test_letterbox_matches_cpu_on_camera_sizes(w, h):
    image, cpu = _cpu(w, h)
    box = g.letterbox((h, w), (640, 640), B)
    assert box.geometry == cpu
    rows, cols = cpu.content_slices()
    assert box.content == (cols.stop - cols.start, rows.stop - rows.start)
    assert box.offset == (cpu.pad_left, cpu.pad_top)
    assert box.output == g.Picture(640, 640, 640, 640)


def test_letterbox_1280x720_by_hand():
    box = g.letterbox((720, 1280), (640, 640), B)
    assert (box.content, box.offset) == ((640, 360), (0, 140))


def test_letterbox_evens_an_odd_content_and_maps_back():
    # 1000x564 -> r 0.64: the CPU's content is 640x361 (odd), pad top round(139.4) = 139;
    # VPC pastes 640x360 at top 138 (both even).
    _, cpu = _cpu(1000, 564)
    assert (cpu.content_size, cpu.pad_top) == ((361, 640), 139)
    box = g.letterbox((564, 1000), (640, 640), B)
    assert (box.content, box.offset) == ((640, 360), (0, 138))
    assert box.geometry.scale_x == cpu.scale_x and box.geometry.scale_y == 360 / 564
    back = box.geometry.to_frame(np.array([[0, 138, 640, 138 + 360]]))
    np.testing.assert_allclose(back, [[0, 0, 1000, 564]], atol=1e-3)


def test_letterbox_310p_left_offset_16_aligned():
    assert g.letterbox((1280, 720), (640, 640), B).offset == (140, 0)
    assert g.letterbox((1280, 720), (640, 640), P).offset == (128, 0)


def test_letterbox_refusals():
    with pytest.raises(InputError, match="multiple of 16"):
        g.letterbox((480, 640), (100, 100), P)  # 310P pads a 100-wide picture to 112
    g.letterbox((480, 640), (100, 100), B)
    with pytest.raises(InputError, match="1/32..32"):
        g.letterbox((4096, 4096), (64, 64), B)
