"""The board the ``sim`` backend simulates: its soc, its memory, and what is not simulated.

Why its own module: the soc and the memory budget are the two limits of a board that a host never
enforces (an OM built for another soc does not load, a model that does not fit does not load), so
they are data the session checks against, the CLI parses and ``edgefuse doctor`` prints; and the
list of what the simulation leaves out is written once here, for the doctor and docs/sim.md.

Boards (the memory the model shares with the OS and the app):
- Ascend310B1..B4, the Atlas 200I DK A2: 4 GB LPDDR4X (Atlas 200I DK A2 product description,
  23.0.RC2, hiascend Atlas200IDKA2DeveloperKit pd_pd_0004; reference ascend-toolchain.md §7.1).
Other socs have no default: the cards that carry them come with several memory sizes, so the
budget must be given (``memory=``, ``--sim-memory``).
"""

from __future__ import annotations

import dataclasses
import numbers
import re

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.errors import InputError, Ref

DEFAULT_SIM_SOC = "Ascend310B4"
GIB = 1 << 30

# soc family -> (board, memory in bytes)
_BOARD_MEMORY: dict[str, tuple[str, int]] = {
    "ascend310b": ("Atlas 200I DK A2", 4 * GIB),
}

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": GIB,
          "kb": 10**3, "mb": 10**6, "gb": 10**9}
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)

# What the simulation reproduces only approximately or not at all (doctor and docs/sim.md).
NOT_SIMULATED: tuple[str, ...] = (
    "speed: the simulation runs on the host CPU; time the board with `edgefuse bench` there",
    "AI Core vs AI CPU placement: every op runs, including ops ATC would send to the slow AI CPU "
    "(see `edgefuse inspect --target SOC` and the build's op_support.json)",
    "exact kernel arithmetic: FP16 is emulated as storage (every FP16 tensor rounded, math in "
    "FP32); the board's vector ops compute in FP16, its Exp/Sigmoid/Div approximate, and ATC's "
    "fusions skip some roundings; how far the board's outputs are from the simulation's is "
    "measured on a board (record goldens there: `edgefuse run --record`)",
    "precision modes other than force_fp16 (the default) and must_keep_origin_dtype: "
    "allow_fp32_to_fp16 runs Conv/ConvTranspose/Gemm/MatMul in FP16 and the rest in FP32, "
    "allow_mix_precision is force_fp16 with the kept nodes (ATC's built-in lists are not known), "
    "force_fp32/cube_fp16in_fp32out run in FP32 (the Cube's FP16 inputs are not rounded); the "
    "session's `numerics.note` says which applies",
    "INT8: a build compiled with --int8 runs its FP16 numerics (the session's `numerics.note` "
    "and a warning say so); the host emulation of the board's INT8 is `edgefuse quantize --int8 "
    "--emulate`'s host_int8.qdq.onnx",
    "memory: the footprint is an estimate (weights + peak activations in graph order + I/O "
    "buffers); ATC's memory planner, workspaces and the OS's share of the board differ",
    "the CANN version: an OM is tied to the CANN that built it; the simulation loads any build",
)


@dataclasses.dataclass(frozen=True)
class SimTarget:
    """One simulated board: the soc its builds must be made for, and the memory a model gets."""

    soc: str
    board: str
    memory: int  # bytes

    def describe(self) -> str:
        return f"{self.soc} ({self.board}, {format_bytes(self.memory)})"


def sim_target(soc: str = DEFAULT_SIM_SOC, memory: int | float | str | None = None) -> SimTarget:
    """The board to simulate: ``soc`` (an exact ``--soc_version``) and ``memory`` (bytes, or a
    string with a unit: ``"4GiB"``, ``"512MiB"``, ``"4GB"`` = 4e9); None takes the board's own."""
    found = validate_soc(soc)
    board, default = _BOARD_MEMORY.get(found.short_name, (found.products, None))
    if memory is None:
        if default is None:
            raise InputError(
                f"edgefuse knows no default memory for a board with {found.name}",
                hint="give the budget: open_session(..., memory='16GiB') or --sim-memory 16GiB",
                reference=Ref.BAD_SESSION_OPTION,
            )
        return SimTarget(found.name, board, default)
    return SimTarget(found.name, board, parse_memory(memory))


def knows_board(soc: str) -> bool:
    """Whether ``sim_target(soc)`` needs no memory budget (edgefuse knows the soc's board)."""
    return validate_soc(soc).short_name in _BOARD_MEMORY


def parse_memory(value: int | float | str) -> int:
    """Bytes from a number of bytes or a string such as ``"4GiB"`` or ``"512 MiB"``."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        amount, unit = float(value), ""
    elif isinstance(value, str) and (match := _AMOUNT.match(value)):
        amount, unit = float(match.group(1)), match.group(2).lower()
    else:
        amount, unit = -1.0, "?"
    if unit not in _UNITS or not amount > 0:
        raise InputError(
            f"memory must be a positive number of bytes or a size like '4GiB', got {value!r}",
            hint="units: B, KiB, MiB, GiB (powers of 2) or KB, MB, GB (powers of 10)",
            reference=Ref.BAD_SESSION_OPTION,
        )
    return int(amount * _UNITS[unit])


def format_bytes(count: int) -> str:
    """``4.00 GiB``, ``97.5 MiB``, ``12.0 KiB``, ``512 B``."""
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.2f} {unit}" if unit == "GiB" else f"{count / size:.1f} {unit}"
    return f"{count} B"
