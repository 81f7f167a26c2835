"""What JPEGD can decode, read from a JPEG's frame header before it is sent.

JPEGD on the 200I/500 A2 ("JPEGD功能及约束说明", 媒体数据处理V2: aclpythondevg_01_0476, CANN
8.0.RC2.2 appdevgapi; the same table in aclpythondevg_01_0321): Huffman-coded JPEG only, no
arithmetic coding, no progressive JPEG, no JPEG 2000; YUV sampling 4:4:4, 4:2:2, 4:2:0, 4:0:0 or
4:4:0, of which the YUV420SP (NV12/NV21) output is documented for 4:4:4, 4:2:2 and 4:2:0, width
and height 2-aligned; output width stride the width 64-aligned, height stride the height
16-aligned (``geometry``: jpegd_out); pictures 32x32 to 8192x8192.

A JPEG outside these (a progressive photo, a grey camera, an odd-sized still) is not sent: the
source decodes that one frame on the CPU and counts it (``jpegd_fallbacks``), so one odd frame
neither stops a stream nor reaches the media unit as a garbled picture.
"""

from __future__ import annotations

import dataclasses

from edgefuse.acl.dvpp import geometry

SEQUENTIAL_HUFFMAN = {0xC0: "baseline", 0xC1: "extended sequential"}
SAMPLINGS = {0x11: "4:4:4", 0x21: "4:2:2", 0x22: "4:2:0", 0x12: "4:4:0"}  # luma (h << 4 | v)
JPEGD_YUV420SP_FROM = ("4:4:4", "4:2:2", "4:2:0")


@dataclasses.dataclass(frozen=True)
class JpegHeader:
    """A JPEG's frame header: its coding process, size and sampling."""

    coding: str  # baseline, extended sequential, progressive, ...
    width: int
    height: int
    precision: int
    sampling: str  # 4:2:0 ..., "grey" for one component, or the factors as read


def read_header(data: bytes) -> JpegHeader | None:
    """The frame header of the JPEG ``data``, None when it has none (not a JPEG, cut short)."""
    if not data.startswith(b"\xff\xd8"):
        return None
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if at + 10 > len(data):
                return None
            coding = SEQUENTIAL_HUFFMAN.get(marker, {
                0xC2: "progressive", 0xC3: "lossless"}.get(marker, "arithmetic coded"))
            precision = data[at + 4]
            height = int.from_bytes(data[at + 5:at + 7], "big")
            width = int.from_bytes(data[at + 7:at + 9], "big")
            components = data[at + 9]
            factors = [data[at + 11 + 3 * i] for i in range(components)
                       if at + 11 + 3 * i < len(data)]
            if components == 1:
                sampling = "grey"
            elif components == 3 and factors[1:] == [0x11, 0x11] and factors[0] in SAMPLINGS:
                sampling = SAMPLINGS[factors[0]]
            else:
                sampling = f"{components} components {'/'.join(f'{f:#x}' for f in factors)}"
            return JpegHeader(coding, width, height, precision, sampling)
        at += 2 + length
    return None


def jpegd_refusal(data: bytes) -> str | None:
    """Why JPEGD would not decode ``data`` into YUV420SP (None: it does)."""
    header = read_header(data)
    if header is None:
        return "no JPEG frame header"
    if header.coding not in SEQUENTIAL_HUFFMAN.values() or header.precision != 8:
        return f"a {header.precision}-bit {header.coding} JPEG (JPEGD: 8-bit Huffman sequential)"
    if header.sampling not in JPEGD_YUV420SP_FROM:
        return f"sampling {header.sampling} (JPEGD's YUV420SP: from 4:4:4, 4:2:2 or 4:2:0)"
    if header.width % 2 or header.height % 2:
        return f"an odd size {header.width}x{header.height} (YUV420SP: 2-aligned)"
    (low_w, low_h), (high_w, high_h) = geometry.JPEGD_MIN, geometry.JPEGD_MAX
    if not (low_w <= header.width <= high_w and low_h <= header.height <= high_h):
        return f"{header.width}x{header.height} outside {low_w}x{low_h}..{high_w}x{high_h}"
    return None
