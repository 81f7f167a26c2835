"""SoC names: validation, npu-smi parsing on captured outputs, detection through a fake npu-smi."""

from pathlib import Path

import pytest

from edgefuse.acl.compile.soc import KNOWN_SOCS, detect_soc, parse_npu_smi_info, validate_soc
from edgefuse.errors import InputError, ToolError

pytestmark = pytest.mark.unit

# Captured `npu-smi info` outputs, as published (whitespace as printed), in captures/:
# npu_smi_310.txt      Atlas 200 DK (Ascend 310), npu-smi 23.0.0 (a public README, via code search)
# npu_smi_310b4.txt    Atlas 200I DK A2 / OrangePi AIpro, npu-smi 23.0.0 (nputop's "npusmi_nohbm"
#                      test fixture)
# npu_smi_310p3_two.txt  Atlas 300I Pro with two chips, npu-smi 23.0.rc3 (a public install guide)
CAPTURES = Path(__file__).parent / "captures"
NPU_SMI_310 = (CAPTURES / "npu_smi_310.txt").read_text()
NPU_SMI_310B4 = (CAPTURES / "npu_smi_310b4.txt").read_text()
NPU_SMI_310P3_TWO = (CAPTURES / "npu_smi_310p3_two.txt").read_text()


def test_known_socs_carry_their_op_info_short_names():
    assert validate_soc("Ascend310B4").short_name == "ascend310b"
    assert validate_soc("Ascend310B1").short_name == "ascend310b"
    assert validate_soc("Ascend310").short_name == "ascend310"
    assert validate_soc("Ascend310P3").short_name == "ascend310p"
    assert validate_soc("Ascend910B3").short_name == "ascend910b"
    assert all(name.startswith("Ascend") for name in KNOWN_SOCS)


def test_the_310p_family_is_the_platform_names_cann_ships():
    family = sorted(name for name, soc in KNOWN_SOCS.items() if soc.short_name == "ascend310p")
    assert family == ["Ascend310P1", "Ascend310P3", "Ascend310P5", "Ascend310P7"]


def test_wrong_spelling_gets_the_exact_name_in_the_hint():
    with pytest.raises(InputError, match="unknown soc '310b4'") as exc:
        validate_soc("310b4")
    assert "--soc Ascend310B4" in exc.value.hint


def test_generic_310b_is_refused_with_the_b1_b4_explanation():
    with pytest.raises(InputError, match="unknown soc") as exc:
        validate_soc("Ascend310B")
    assert "Ascend310B1" in exc.value.hint and "Ascend310B4" in exc.value.hint
    assert "npu-smi info" in exc.value.hint


def test_typo_gets_close_matches():
    with pytest.raises(InputError) as exc:
        validate_soc("Ascend301B4")
    assert "Ascend310B4" in exc.value.hint


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NPU_SMI_310, [(0, 0, "310", "OK")]),
        (NPU_SMI_310B4, [(0, 0, "310B4", "Alarm")]),
        (NPU_SMI_310P3_TWO, [(0, 0, "310P3", "OK"), (64, 0, "310P3", "OK")]),
        ("", []),
    ],
)
def test_parse_npu_smi_info(text, expected):
    chips = parse_npu_smi_info(text)
    assert [(c.npu_id, c.chip_id, c.name, c.health) for c in chips] == expected


def _fake_npu_smi(tmp_path, output: str, status: int = 0):
    script = tmp_path / "npu-smi"
    (tmp_path / "out.txt").write_text(output)
    script.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.txt'}'\nexit {status}\n")
    script.chmod(0o755)
    return str(script)


def test_detect_soc_reads_the_chip_name(tmp_path):
    assert detect_soc(_fake_npu_smi(tmp_path, NPU_SMI_310B4)) == "Ascend310B4"
    assert detect_soc(_fake_npu_smi(tmp_path, NPU_SMI_310P3_TWO)) == "Ascend310P3"


def test_detect_soc_without_npu_smi_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_soc() is None


def test_detect_soc_reports_a_failing_npu_smi(tmp_path):
    with pytest.raises(ToolError, match="exited with 3"):
        detect_soc(_fake_npu_smi(tmp_path, "dcmi module initialize failed", status=3))


def test_detect_soc_refuses_mixed_chips(tmp_path):
    mixed = NPU_SMI_310P3_TWO.replace("| 64    310P3", "| 64    310P1")
    with pytest.raises(InputError, match="several kinds: 310P1, 310P3"):
        detect_soc(_fake_npu_smi(tmp_path, mixed))
