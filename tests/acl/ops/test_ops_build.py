"""``edgefuse ops build``: the project without CANN, the build with a stand-in toolkit, atomicity.

No CANN here, so the toolkit is faked: ``msopgen`` writes a minimal project whose ``build.sh``
checks what edgefuse's ``build.sh`` must have done (vendor name, json.hpp, edgefuse's sources in
place of the stubs) and packs a ``custom_opp_*.run``. That tests edgefuse's side of the
contract; the real msopgen/cmake build can only be checked on a CANN host.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from edgefuse.acl.ops.build import build_op_package
from edgefuse.acl.ops.registry import ALL_OPS
from edgefuse.cli.main import main
from edgefuse.errors import InputError, ToolError

pytestmark = pytest.mark.standin

FAKE_MSOPGEN = r"""#!/bin/bash
echo "$@" >> "$FAKE_LOG"
out=""
while [ $# -gt 0 ]; do
  case "$1" in -out) out="$2"; shift 2 ;; *) shift ;; esac
done
mkdir -p "$out/tbe/impl" "$out/op_proto" "$out/framework/onnx_plugin"
echo "stub" > "$out/tbe/impl/edgefuse_swish.py"
[ -f "$out/build.sh" ] || cat > "$out/build.sh" <<'EOS'
#!/bin/bash
vendor_name=customize
grep -q '^vendor_name=edgefuse$' build.sh || { echo "vendor not set"; exit 7; }
[ -f framework/onnx_plugin/json.hpp ] || { echo "no json.hpp"; exit 8; }
grep -q TBE tbe/impl/edgefuse_swish.py || { echo "stub kept"; exit 9; }
[ -z "$FAKE_FAIL" ] || { echo "boom: cmake error"; exit 1; }
mkdir -p build_out && ls -R tbe op_proto framework > build_out/custom_opp_fake_x86_64.run
EOS
"""


@pytest.fixture
def fake_cann(tmp_path):
    """Environment of a host with a stand-in CANN toolkit (msopgen, cmake, json.hpp)."""
    toolkit = tmp_path / "toolkit"
    (toolkit / "include" / "nlohmann").mkdir(parents=True)
    (toolkit / "include" / "nlohmann" / "json.hpp").write_text("// json\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "msopgen").write_text(FAKE_MSOPGEN)
    (tools / "cmake").write_text("#!/bin/bash\nexit 0\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    return {
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "ASCEND_HOME_PATH": str(toolkit),
        "FAKE_LOG": str(tmp_path / "msopgen.log"),
    }


@pytest.fixture
def no_cann(monkeypatch, tmp_path):
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))


NO_CANN: dict[str, str] = {}  # an environment without the toolkit, for direct API calls


def leftovers(parent: Path, name: str) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_without_cann_the_project_is_written_and_the_cli_exits_0(no_cann, tmp_path, capsys):
    target = tmp_path / "opp"
    assert main(["ops", "build", "--soc", "Ascend310B4", "-o", str(target)]) == 0
    out = capsys.readouterr().out
    assert "not built" in out and "ASCEND_HOME_PATH" in out and "bash build.sh" in out
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["built"] is False and manifest["soc_short"] == "ascend310b"
    assert [op["ascend_type"] for op in manifest["ops"]] == [s.ascend_type for s in ALL_OPS]
    for path in manifest["files"]:
        assert (target / path).is_file(), path
    assert (target / "tbe/op_info_cfg/ai_core/ascend310b/edgefuse_yolo_head.ini").is_file()
    assert os.access(target / "build.sh", os.X_OK)
    assert leftovers(tmp_path, "opp") == []


def test_require_cann_without_cann_exits_2_and_writes_nothing(no_cann, tmp_path, capsys):
    target = tmp_path / "opp"
    code = main(["ops", "build", "--soc", "Ascend310B4", "-o", str(target), "--require-cann"])
    assert code == 2
    err = capsys.readouterr().err
    assert "error[cann-not-found]" in err and "Traceback" not in err
    assert not target.exists() and leftovers(tmp_path, "opp") == []


def test_an_unknown_soc_is_a_user_error(no_cann, tmp_path, capsys):
    assert main(["ops", "build", "--soc", "Ascend999", "-o", str(tmp_path / "opp")]) == 2
    assert "error[unknown-soc]" in capsys.readouterr().err


def test_selected_ops_only(tmp_path):
    package = build_op_package("Ascend310B4", tmp_path / "opp", ALL_OPS[:1], env=NO_CANN)
    assert package.ops == ("Swish",) and not package.built
    assert not (tmp_path / "opp" / "op_proto" / "edgefuse_yolo_head.h").exists()
    assert json.loads((tmp_path / "opp" / "edgefuse_ops.json").read_text())[0]["op"] == (
        "EdgefuseSwish"
    )


def test_an_existing_project_is_replaced_and_a_file_is_refused(tmp_path):
    target = tmp_path / "opp"
    target.mkdir()
    (target / "stale.txt").write_text("old")
    build_op_package("Ascend310B4", target, env=NO_CANN)
    assert not (target / "stale.txt").exists() and (target / "build.sh").exists()
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        build_op_package("Ascend310B4", afile, env=NO_CANN)


def test_the_scripts_are_valid_bash(tmp_path):
    build_op_package("Ascend310B4", tmp_path / "opp", env=NO_CANN)
    for script in ("build.sh", "install.sh"):
        subprocess.run(["bash", "-n", str(tmp_path / "opp" / script)], check=True)


def test_with_a_toolkit_the_package_is_built(fake_cann, tmp_path):
    package = build_op_package("Ascend310B4", tmp_path / "opp", env=fake_cann)
    assert package.built and package.not_built == ()
    assert package.run_file == tmp_path / "opp" / "custom_opp_fake_x86_64.run"
    assert "edgefuse_yolo_head_plugin.cc" in package.run_file.read_text()
    calls = Path(fake_cann["FAKE_LOG"]).read_text().splitlines()
    assert [c.split(" -op ")[1].split()[0] for c in calls] == [s.ascend_type for s in ALL_OPS]
    assert all("-c ai_core-ascend310b" in c and "-f onnx" in c for c in calls)
    assert ["-m" in c for c in calls] == [False, True, True]
    assert json.loads((tmp_path / "opp" / "manifest.json").read_text())["built"] is True
    assert "install.sh" in package.summary() and "ASCEND_CUSTOM_OPP_PATH" in package.summary()


def test_a_failed_build_is_a_tool_error_and_leaves_nothing(fake_cann, tmp_path):
    with pytest.raises(ToolError, match="build.sh exit") as error:
        build_op_package("Ascend310B4", tmp_path / "opp", env={**fake_cann, "FAKE_FAIL": "1"})
    assert "boom: cmake error" in error.value.context
    assert not (tmp_path / "opp").exists() and leftovers(tmp_path, "opp") == []


def test_ops_list_names_every_op(capsys):
    assert main(["ops", "list"]) == 0
    out = capsys.readouterr().out
    for spec in ALL_OPS:
        assert f"edgefuse::{spec.name} -> {spec.ascend_type}" in out
