"""Ascend SoC names: the known list, validation, and detection from ``npu-smi info``.

Why a list and not a free string: ATC only accepts the ``--soc_version`` values its install knows
(the ``.ini`` files in ``<CANN>/compiler/data/platform_config/``), and a typo there fails late and
obscurely. Why detection: the Atlas 200I DK A2 shows up as ``Ascend310B1`` in Ascend/samples
READMEs (tested on CANN 6.2.RC1) and as ``Ascend310B4`` in user reports on CANN 8.0.RC3
(nndeploy/nndeploy#185) and in ``npu-smi info`` captures, so the only trustworthy source is the
board itself. msopgen's documented rule: Chip Name ``xxxyy`` in ``npu-smi info`` gives
``--soc_version=Ascendxxxyy`` (hiascend CANNCommunityEdition/82RC1alpha002
devaids/optool/atlasopdev_16_0018.html). Off the board the user must name it.

Sources of the list: torch_npu's ``SocVersion`` enum (Ascend/pytorch@torch_npu/csrc/core/npu/
NpuVariables.h) plus the first-generation ``Ascend310`` used throughout Ascend/samples. Short names
are the lower-case op-info folders of TBE / Ascend C custom operators (Ascend/samples
cplusplus/level1_single_api/4_op_dev/1_custom_op/tbe/op_info_cfg/ai_core/*, and
``AddConfig("ascend310b")`` in Ascend C ``OpDef``).
"""

from __future__ import annotations

import dataclasses
import difflib
import shutil
import subprocess

from edgefuse.errors import InputError, Ref, ToolError


@dataclasses.dataclass(frozen=True)
class Soc:
    """One ``--soc_version`` value and the family it belongs to."""

    name: str  # exactly as ATC spells it, e.g. "Ascend310B4"
    short_name: str  # op-info folder of custom operators, e.g. "ascend310b"
    products: str  # what hardware carries it, for messages


_FAMILIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("ascend310", ("Ascend310",), "Atlas 200 DK, Atlas 300 AI1 (first-generation Ascend 310)"),
    (
        "ascend310b",
        ("Ascend310B1", "Ascend310B2", "Ascend310B3", "Ascend310B4"),
        "Atlas 200I DK A2, Atlas 200I/500 A2, OrangePi AIpro",
    ),
    (
        # The platform names CANN ships for the family: Ascend C's ascend310p_list
        # (ascend310p1/3/5/7, cmake soc lists of cannmirror/asc-devkit) and torch_npu's
        # SocVersion; P2 and P4 exist in torch_npu's enum only.
        "ascend310p",
        ("Ascend310P1", "Ascend310P3", "Ascend310P5", "Ascend310P7"),
        "Atlas 300I Pro/Duo (Atlas inference series)",
    ),
    (
        "ascend910",
        ("Ascend910PremiumA", "Ascend910ProA", "Ascend910A", "Ascend910ProB", "Ascend910B"),
        "Atlas 800/900 training (Ascend 910)",
    ),
    (
        "ascend910b",
        ("Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3", "Ascend910B4"),
        "Atlas A2 training/inference (Ascend 910B)",
    ),
)

KNOWN_SOCS: dict[str, Soc] = {
    name: Soc(name, short, products) for short, names, products in _FAMILIES for name in names
}

# Names people type that do not identify one --soc_version on their own.
_AMBIGUOUS = {
    "ascend310b": "the Atlas 200I DK A2 reports Ascend310B1 on some images and Ascend310B4 on "
    "others; run `npu-smi info` on the board and use Ascendxxxyy from its Name column",
    "ascend310p": "Atlas 300I Pro/Duo cards are usually Ascend310P3; check `npu-smi info`",
    "ascend910": "use the exact name from `npu-smi info`, e.g. Ascend910B3",
}


def validate_soc(name: str) -> Soc:
    """The ``Soc`` for an exact ``--soc_version`` name, or an error that says which one to use."""
    if name in KNOWN_SOCS:
        return KNOWN_SOCS[name]
    by_lower = {known.lower(): known for known in KNOWN_SOCS}
    lowered = name.strip().lower()
    if not lowered.startswith("ascend"):
        lowered = "ascend" + lowered  # "310B4" -> "ascend310b4"
    if lowered in by_lower:
        hint = f"write it as ATC spells it: --soc {by_lower[lowered]}"
    elif lowered in _AMBIGUOUS:
        hint = _AMBIGUOUS[lowered]
    else:
        close = difflib.get_close_matches(name, KNOWN_SOCS, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else (
            "known: " + ", ".join(KNOWN_SOCS)
        )
    raise InputError(f"unknown soc '{name}'", hint=hint, reference=Ref.UNKNOWN_SOC)


@dataclasses.dataclass(frozen=True)
class NpuChip:
    """One chip row pair of ``npu-smi info``."""

    npu_id: int
    chip_id: int
    name: str  # the Name column, e.g. "310B4"
    health: str


# Health states npu-smi prints (its field notes list OK, Warning, Alarm, Critical, UNKNOWN). A
# device's first row has one in its second cell; its second row has the Bus-Id ("NA" or a PCI id).
_HEALTH_STATES = {"ok", "warning", "alarm", "critical", "unknown"}


def parse_npu_smi_info(text: str) -> list[NpuChip]:
    """Chips listed by ``npu-smi info`` (driver 21.x to 25.x table layouts).

    Each device takes two rows: ``NPU Name | Health | ...`` then ``Chip [Device] | Bus-Id | ...``.
    The process table that may follow ("NPU Chip | Process id | ...") ends the scan.
    """
    chips: list[NpuChip] = []
    pending: tuple[int, str, str] | None = None
    for line in text.splitlines():
        if "Process id" in line:
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        tokens = cells[0].split()
        if not tokens or not tokens[0].isdigit():
            continue
        if len(tokens) >= 2 and cells[1].lower() in _HEALTH_STATES:
            pending = (int(tokens[0]), tokens[1], cells[1])
        elif pending is not None:
            npu_id, chip_name, health = pending
            chips.append(NpuChip(npu_id, int(tokens[0]), chip_name, health))
            pending = None
    return chips


def soc_from_chip_name(chip_name: str) -> str:
    """``310B4`` -> ``Ascend310B4`` (msopgen's documented rule), validated against the list."""
    name = chip_name if chip_name.lower().startswith("ascend") else f"Ascend{chip_name}"
    return validate_soc(name).name


def detect_soc(npu_smi: str | None = None, *, timeout: float = 30.0) -> str | None:
    """The soc of the board this runs on, from ``npu-smi info``; None where there is no npu-smi.

    Raises when npu-smi exists but fails, or lists chips of different kinds (then the user must
    say which one the model is for).
    """
    executable = npu_smi or shutil.which("npu-smi")
    if executable is None:
        return None
    try:
        done = subprocess.run(
            [executable, "info"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(
            f"`npu-smi info` could not run: {exc}",
            hint="pass --soc explicitly",
            reference=Ref.NPU_SMI_FAILED,
        ) from exc
    if done.returncode != 0:
        raise ToolError(
            f"`npu-smi info` exited with {done.returncode}",
            context=(done.stderr or done.stdout).strip()[-2000:] or None,
            hint="check the NPU driver (`npu-smi info` must list the chip), or pass --soc",
            reference=Ref.NPU_SMI_FAILED,
        )
    chips = parse_npu_smi_info(done.stdout)
    names = sorted({chip.name for chip in chips})
    if not names:
        raise ToolError(
            "`npu-smi info` listed no NPU",
            context=done.stdout.strip()[-2000:] or None,
            hint="pass --soc explicitly",
            reference=Ref.NPU_SMI_FAILED,
        )
    if len(names) > 1:
        raise InputError(
            f"this host has chips of several kinds: {', '.join(names)}",
            hint="pass --soc with the one the model is for",
            reference=Ref.AMBIGUOUS_SOC,
        )
    return soc_from_chip_name(names[0])
