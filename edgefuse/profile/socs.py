"""Published peak figures of Ascend SoCs, each with its source: the inputs of the board's floor.

Why only published figures: a floor is only worth having if nobody has to trust it; a guessed
peak would make it a guess. A SoC is listed when its matrix-unit (Cube) peak and its memory
bandwidth are published; a figure that is not published is ``None`` and its term is left out of
the floor, which keeps the floor a lower bound (the maximum of fewer terms is never larger).
SoCs without published figures are not listed, and asking for one is an error that says so.

Ascend310B4 (Atlas 200I DK A2), from Huawei's product description of the developer kit
(doc version 23.0.RC2, https://www.hiascend.com/llms-content/document/detail/
Atlas200IDKA2DeveloperKit/Atlas200IDKA2DeveloperKit_230RC2_pd_pd_0004_html.md, summarised in the
project's reference notes, ascend-toolchain.md section 7.1):
- "FP16 4 TFLOPS, INT8 8 TOPS" as the stably provided peak of the AI processor (one DaVinci
  V300 AI Core at 500 MHz);
- memory "4 GB LPDDR4X, 3200 Mbps, 64 bit": 3200e6 transfers/s x 8 bytes = 25.6 GB/s. This is
  the bus's peak, derived from the two published figures, not a published bandwidth figure;
- the Vector unit's peak is not published for this SoC (Ascend C documents a Vector iteration
  as 256 bytes, not its rate), so vector ops are bounded by memory traffic alone.

Other SoCs of edgefuse's list (edgefuse.acl.compile.soc) are left out: their peak figures were not
found in a source of this kind (Ascend310B1 boards ship at several clock levels, 8T and 20T,
under the same name, so no single figure describes them).
"""

from __future__ import annotations

import dataclasses

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.errors import InputError, Ref


@dataclasses.dataclass(frozen=True)
class SocPeaks:
    """Peak rates of one SoC: FLOP/s (ops/s for int8) per unit and dtype, bytes/s of memory."""

    soc: str
    board: str
    cube_flops: dict[str, float]  # dtype -> ops per second on the matrix unit
    vector_flops: dict[str, float] | None  # None: not published
    memory_bytes_per_s: float
    sources: tuple[str, ...]
    notes: tuple[str, ...] = ()


_DK_A2_SPEC = ("https://www.hiascend.com/llms-content/document/detail/Atlas200IDKA2DeveloperKit/"
               "Atlas200IDKA2DeveloperKit_230RC2_pd_pd_0004_html.md")

SOC_PEAKS: dict[str, SocPeaks] = {
    "Ascend310B4": SocPeaks(
        soc="Ascend310B4",
        board="Atlas 200I DK A2",
        cube_flops={"fp16": 4e12, "int8": 8e12},
        vector_flops=None,
        memory_bytes_per_s=3200e6 * 64 / 8,
        sources=(f"FP16 4 TFLOPS, INT8 8 TOPS: {_DK_A2_SPEC}",
                 f"LPDDR4X 3200 Mbps x 64 bit = 25.6 GB/s (derived): {_DK_A2_SPEC}"),
        notes=("the Vector unit's peak is not published: vector ops are bounded by memory alone",
               "memory bandwidth is the bus peak derived from the published speed and width"),
    ),
}


def soc_peaks(name: str) -> SocPeaks:
    """The peaks of ``name``; an unknown name, or a known SoC without published figures, is a
    user error naming the SoCs that have them."""
    soc = validate_soc(name).name
    if soc not in SOC_PEAKS:
        raise InputError(
            f"no published peak figures for {soc}, so edgefuse gives it no floor",
            hint=f"SoCs with published figures: {', '.join(SOC_PEAKS)}; without a figure the "
                 "floor would be a guess, not a lower bound",
            reference=Ref.NO_PEAK_FIGURES,
        )
    return SOC_PEAKS[soc]
