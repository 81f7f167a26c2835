"""The DVPP media API's documented picture rules, as pure functions checked before every call.

Why a table and not the hardware's answer: a VDEC/VPC/JPEGD call with a stride or buffer size
one byte off fails asynchronously (a timeout, a garbled frame, or a process killed by the media
driver) far from the line that built it. Every size the board path hands the media API is made
here and checked here first, with the page that states the rule, so the strict stand-in
(tests/fakes) and the ``sim`` emulation lay out exactly the buffers the board would.

The rules, YUV420SP (NV12/NV21) 8-bit only, per SoC family (``Ascend310B``: Atlas 200I/500 A2;
``Ascend310P``: Atlas inference series, 300I Pro/Duo):

- VPC ("VPC约束说明": aclcppdevg_03_0637, CANN 8.5/9.0 appdevgapi; the DK A2 guide's
  aclcppdevg_03_0963 and pyACL aclpythondevg_01_0417): width and height 2-aligned; input
  10x6..8192x8192; output 10x6..4096x8192 (W x H) on the 200I/500 A2, 10x6..4096x4096 on
  310P. Width stride: 310B none (>= width, min 10), 310P 16-aligned (32..16384); height stride
  the height 2-aligned (min 6); buffer = stride_w * stride_h * 3 / 2 bytes.
- VPC crop-resize-paste (hi_mpi_vpc_crop_resize_paste aclcppdevg_03_0644 and
  hi_vpc_crop_resize_paste_region aclcppdevg_03_1060): the paste's top/left offsets even for a
  YUV420SP output; on 310P the left offset 16-aligned; a resize ratio within [1/32, 32]
  (aclcppdevg_03_0660's resize limit).
- VDEC output (VDEC 功能及约束说明: aclcppdevg_03_0686, pyACL aclpythondevg_01_0478;
  hi_vdec_pic_info aclpythondevg_01_0513): width/height 2-aligned; 310P width stride 16-aligned
  (32..16384), height stride height 2-aligned; 310B strides need no alignment (>= width/height,
  min 10x6, max 24576); buffer >= stride_w * stride_h * 3 / 2. Stream input 128x128 up to
  4096x4096 (the most restrictive row of the table: the DK A2's own guide lists no larger one).
- JPEGD output (JPEGD 功能及约束说明: aclpythondevg_01_0321): width stride the width 64-aligned
  and height stride the height 16-aligned on both 310B and 310P; buffer >= ws * hs * 3 / 2.
- Channels (hi_mpi_vdec_create_chn aclcppdevg_03_0688, pyACL aclpythondevg_01_0480): VDEC and
  JPEGD share one channel space, [0, 128) on the 200I/500 A2 and [0, 256) on 310P.

The letterbox into the model's input is edgefuse.preprocess's (Ultralytics' ``LetterBox``),
with the one difference the hardware forces: a YUV420SP picture's sizes and paste offsets are
even, so an odd content size or pad is rounded down to even and the returned ``Geometry`` says
what was really done (per-axis scale), so boxes still map back exactly.
"""

from __future__ import annotations

import dataclasses

from edgefuse.errors import InputError, Ref
from edgefuse.preprocess import Geometry, letterbox_sizes

UNITS = ("vpc_in", "vpc_out", "vdec_out", "jpegd_out")


@dataclasses.dataclass(frozen=True)
class SocRules:
    """One SoC family's DVPP numbers (the pages are in the module docstring)."""

    family: str
    channels: int  # VDEC + JPEGD channel ids are [0, channels)
    vpc_in_max: tuple[int, int]  # (width, height)
    vpc_out_max: tuple[int, int]
    vpc_stride_align: int  # width stride alignment of VPC pictures (1: none)
    vpc_min_stride_w: int
    vdec_stride_align: int
    vdec_min_stride_w: int
    vdec_max_stride: int
    paste_left_align: int  # alignment of a YUV420SP paste's left offset
    shared_memory: bool  # host and device share one memory (aclrtGetRunMode = ACL_DEVICE)


SOC_RULES = {
    "Ascend310B": SocRules("Ascend310B", 128, (8192, 8192), (4096, 8192), 1, 10, 1, 10, 24576,
                           2, True),
    "Ascend310P": SocRules("Ascend310P", 256, (8192, 8192), (4096, 4096), 16, 32, 16, 32, 16384,
                           16, False),
}
MIN_SIZE = (10, 6)  # every unit's smallest picture (width, height)
VDEC_STREAM_MIN = (128, 128)
VDEC_STREAM_MAX = (4096, 4096)
JPEGD_MIN, JPEGD_MAX = (32, 32), (8192, 8192)
JPEGD_STRIDE_ALIGN = (64, 16)
RESIZE_RATIO = (1 / 32, 32)


@dataclasses.dataclass(frozen=True)
class Picture:
    """A YUV420SP picture in device memory: its size, strides and buffer bytes."""

    width: int
    height: int
    stride_w: int
    stride_h: int

    @property
    def size(self) -> int:
        """Bytes of the buffer: luma stride_w x stride_h plus chroma half of that."""
        return self.stride_w * self.stride_h * 3 // 2


def rules_for(soc: str) -> SocRules:
    """The rules of ``soc`` (``Ascend310B4``, ``Ascend310P3`` ...), by family."""
    for family, rules in SOC_RULES.items():
        if soc.lower().startswith(family.lower()):
            return rules
    raise InputError(f"no documented DVPP rules for SoC '{soc}'",
                     hint="DVPP decode is written for " + ", ".join(SOC_RULES)
                          + "; use decode: cpu on other SoCs",
                     reference=Ref.DVPP_GEOMETRY)


def align_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def picture(width: int, height: int, soc: str, unit: str) -> Picture:
    """The YUV420SP picture ``unit`` (one of UNITS) lays out for a width x height image."""
    rules = rules_for(soc)
    if unit == "jpegd_out":
        return Picture(width, height, align_up(width, JPEGD_STRIDE_ALIGN[0]),
                       align_up(height, JPEGD_STRIDE_ALIGN[1]))
    if unit == "vdec_out":
        align, least = rules.vdec_stride_align, rules.vdec_min_stride_w
    elif unit in ("vpc_in", "vpc_out"):
        align, least = rules.vpc_stride_align, rules.vpc_min_stride_w
    else:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    stride_w = max(align_up(width, align), least)
    return Picture(width, height, stride_w, align_up(height, 2))


def check_picture(pic: Picture, soc: str, unit: str, *, buffer_size: int | None = None,
                  where: str = "") -> None:
    """Refuse a picture ``unit`` cannot take: odd sizes, bad strides, out of range, short
    buffer (``buffer_size``: the bytes allocated for it)."""
    rules = rules_for(soc)
    label = f"{where or unit}: {pic.width}x{pic.height} (stride {pic.stride_w}x{pic.stride_h})"
    if pic.width % 2 or pic.height % 2:
        _refuse(f"{label}: YUV420SP width and height must be even",
                "round the size to even (VPC约束说明)")
    low_w, low_h = JPEGD_MIN if unit == "jpegd_out" else MIN_SIZE
    high_w, high_h = {"vpc_in": rules.vpc_in_max, "vpc_out": rules.vpc_out_max,
                      "vdec_out": VDEC_STREAM_MAX, "jpegd_out": JPEGD_MAX}[unit]
    if not (low_w <= pic.width <= high_w and low_h <= pic.height <= high_h):
        _refuse(f"{label}: outside {low_w}x{low_h}..{high_w}x{high_h} on {rules.family}",
                "resize on the CPU first or choose decode: cpu")
    expected = picture(pic.width, pic.height, soc, unit)
    if _stride_align(rules, unit) > 1:  # the documented stride is the aligned size, exactly
        stride_ok = (pic.stride_w, pic.stride_h) == (expected.stride_w, expected.stride_h)
    else:  # no alignment: any stride that holds the picture, the height's even
        stride_ok = (pic.stride_w >= expected.stride_w and pic.stride_h >= expected.stride_h
                     and pic.stride_h % 2 == 0)
    if stride_ok and unit == "vdec_out":
        stride_ok = max(pic.stride_w, pic.stride_h) <= rules.vdec_max_stride
    if not stride_ok:
        _refuse(f"{label}: {unit} on {rules.family} needs stride "
                f"{expected.stride_w}x{expected.stride_h}",
                "lay the picture out with edgefuse.acl.dvpp.geometry.picture()")
    if buffer_size is not None and buffer_size < pic.size:
        _refuse(f"{label}: buffer of {buffer_size} bytes, needs {pic.size} "
                f"(stride_w * stride_h * 3/2)", "allocate picture(...).size bytes")


def _stride_align(rules: SocRules, unit: str) -> int:
    if unit == "jpegd_out":
        return JPEGD_STRIDE_ALIGN[0]
    return rules.vdec_stride_align if unit == "vdec_out" else rules.vpc_stride_align


def check_channel(channel: int, soc: str, in_use: set[int] | frozenset[int] = frozenset()) -> None:
    """A VDEC/JPEGD channel id must lie in the SoC's shared range and be free."""
    rules = rules_for(soc)
    if not 0 <= channel < rules.channels:
        _refuse(f"decode channel {channel} is outside [0, {rules.channels}) on {rules.family} "
                "(VDEC and JPEGD share it)", "use fewer cameras per board")
    if channel in in_use:
        _refuse(f"decode channel {channel} is already created",
                "destroy the channel before creating it again (hi_mpi_vdec_create_chn)")


@dataclasses.dataclass(frozen=True)
class Letterbox:
    """Where VPC pastes the resized frame in the model's input, and the geometry back."""

    content: tuple[int, int]  # (width, height) of the resized frame
    offset: tuple[int, int]  # (left, top) of the paste
    output: Picture  # the model input picture (the AIPP build's YUV420SP source)
    geometry: Geometry


def letterbox(src: tuple[int, int], dst: tuple[int, int], soc: str, *, pad_value: int = 114,
              center: bool = True, rounding: str = "round") -> Letterbox:
    """The crop-resize-paste that letterboxes a (height, width) frame into a (height, width)
    model input, as edgefuse.preprocess.letterbox does, sizes and offsets made even (and the
    left offset 16-aligned on 310P, rounded down so the content still fits)."""
    rules = rules_for(soc)
    (h, w), (height, width) = src, dst
    ratio, (cpu_w, cpu_h), (left, top) = letterbox_sizes((h, w), (height, width), center,
                                                          rounding)
    new_w, new_h = cpu_w - cpu_w % 2, cpu_h - cpu_h % 2
    left -= left % rules.paste_left_align
    top -= top % 2
    output = picture(width, height, soc, "vpc_out")
    check_picture(picture(w, h, soc, "vpc_in"), soc, "vpc_in", where="the frame")
    check_picture(output, soc, "vpc_out", where="the model input")
    if (output.stride_w, output.stride_h) != (width, height):
        _refuse(f"the model input {width}x{height} needs VPC stride {output.stride_w}x"
                f"{output.stride_h} on {rules.family}; the AIPP build reads it unpadded",
                "compile the model with an input width that is a multiple of 16")
    for axis in (new_w / w, new_h / h):
        if not RESIZE_RATIO[0] <= axis <= RESIZE_RATIO[1]:
            _refuse(f"resizing {w}x{h} to {new_w}x{new_h} is outside VPC's 1/32..32",
                    "decode: cpu resizes any ratio")
    # The CPU's ratio where evening changed nothing, so both paths map boxes back identically.
    scale_x = ratio if new_w == cpu_w else new_w / w
    scale_y = ratio if new_h == cpu_h else new_h / h
    geometry = Geometry((h, w), (height, width), scale_x, scale_y, left, top, pad_value,
                        center, rounding=rounding)
    return Letterbox((new_w, new_h), (left, top), output, geometry)


def _refuse(message: str, hint: str) -> None:
    raise InputError(message, hint=hint, reference=Ref.DVPP_GEOMETRY)
