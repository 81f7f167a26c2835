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

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.acl.ops.build import build_op_package, project_files
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


def test_an_existing_directory_is_refused_without_force(tmp_path, capsys):
    target = tmp_path / "opp"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    code = main(["ops", "build", "--soc", "Ascend310B4", "-o", str(target)])
    assert code == 2 and "error[bad-output-path]" in capsys.readouterr().err
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_force_never_deletes_a_directory_ops_build_did_not_write(tmp_path, capsys):
    target = tmp_path / "opp"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    (target / "manifest.json").write_text('{"soc": "Ascend310B4"}')  # someone else's manifest
    code = main(["ops", "build", "--soc", "Ascend310B4", "-o", str(target), "--force"])
    err = capsys.readouterr().err
    assert code == 2 and "not an op project written by `edgefuse ops build`" in err
    assert (target / "notes.txt").read_text() == "mine"
    assert leftovers(tmp_path, "opp") == []


def test_force_replaces_a_project_ops_build_wrote_and_an_empty_directory_is_used(tmp_path):
    target = tmp_path / "opp"
    target.mkdir()
    build_op_package("Ascend310B4", target, env=NO_CANN)  # empty: used as it is
    (target / "stale.txt").write_text("old")
    with pytest.raises(InputError, match="already exists"):
        build_op_package("Ascend310B4", target, env=NO_CANN)
    build_op_package("Ascend310B4", target, overwrite=True, env=NO_CANN)
    assert not (target / "stale.txt").exists() and (target / "build.sh").exists()
    assert leftovers(tmp_path, "opp") == []


def test_a_file_as_output_is_refused(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        build_op_package("Ascend310B4", afile, env=NO_CANN)


# ---- what goes into the scripts --------------------------------------------------------------


def test_a_vendor_name_with_shell_syntax_is_refused_and_nothing_is_written(tmp_path, capsys):
    target = tmp_path / "opp"
    code = main(["ops", "build", "--soc", "Ascend310B4", "-o", str(target),
                 "--vendor", 'x"; rm -rf "$HOME"'])
    assert code == 2 and "error[bad-vendor-name]" in capsys.readouterr().err
    assert not target.exists() and leftovers(tmp_path, "opp") == []
    for bad in ("", "1abc", "a b", "a/b", "a,b", "x" * 65):
        with pytest.raises(InputError, match="vendor name"):
            project_files(ALL_OPS, validate_soc("Ascend310B4"), bad)


def test_the_script_variables_hold_exactly_the_values(tmp_path):
    files = project_files(ALL_OPS[:2], validate_soc("Ascend310P3"), "my_vendor-2")
    for script, names in (("build.sh", ("SOC_SHORT", "VENDOR", "OPS", "KERNELS", "CANN_RANGE")),
                          ("install.sh", ("VENDOR",))):
        assignments = "\n".join(line for line in files[script].splitlines()
                                 if line.split("=")[0] in names)
        printed = subprocess.run(
            ["bash", "-c", assignments + '\nfor n in ' + " ".join(names)
             + '; do declare -n v=$n; printf "%s|" "${v[@]}"; echo; done'],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()
        expected = {"SOC_SHORT": "ascend310p|", "VENDOR": "my_vendor-2|",
                    "OPS": "EdgefuseSwish|EdgefuseDepthwiseConv2d|",
                    "KERNELS": "edgefuse_swish|edgefuse_depthwise_conv2d|",
                    "CANN_RANGE": "CANN 6.0 up to, not including, 8.5|"}
        assert printed == [expected[name] for name in names]


# ---- ops and chips -------------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend910A"])
def test_yolo_head_is_left_out_for_chips_without_its_instructions(tmp_path, capsys, soc):
    target = tmp_path / "opp"
    assert main(["ops", "build", "--soc", soc, "-o", str(target)]) == 0
    out = capsys.readouterr().out
    assert "left out YoloHead: its TIK kernel uses vec_sel mode 2" in out
    manifest = json.loads((target / "manifest.json").read_text())
    assert [op["ascend_type"] for op in manifest["ops"]] == [
        "EdgefuseSwish", "EdgefuseDepthwiseConv2d"]
    assert manifest["skipped"][0]["op"] == "YoloHead"
    assert not list(target.rglob("edgefuse_yolo_head*"))


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend910A"])
def test_asking_for_yolo_head_on_those_chips_is_an_error(tmp_path, capsys, soc):
    target = tmp_path / "opp"
    code = main(["ops", "build", "--soc", soc, "-o", str(target), "--ops", "Swish,YoloHead"])
    err = capsys.readouterr().err
    assert code == 2 and "error[op-not-on-soc]" in err
    assert f"YoloHead cannot be built for {soc}" in err
    assert "--no-custom-ops" in err and not target.exists()


@pytest.mark.parametrize("soc", ["Ascend310B1", "Ascend310P3", "Ascend910B3"])
def test_yolo_head_is_built_for_the_chips_that_have_its_instructions(tmp_path, soc):
    package = build_op_package(soc, tmp_path / "opp", env=NO_CANN)
    assert "YoloHead" in package.ops and package.skipped == ()


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
    assert "kernel builds for: ascend310b, ascend310p, ascend910b" in out


# ---- the CANN versions the packages target ----------------------------------------------------


def with_version(env: dict[str, str], version: str) -> dict[str, str]:
    info = Path(env["ASCEND_HOME_PATH"]) / "x86_64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True, exist_ok=True)
    info.write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\narch=x86_64\n")
    return env


@pytest.mark.parametrize("version", ["8.5.0", "9.0.0-beta.1", "5.1.RC2"])
def test_a_toolkit_outside_the_target_range_is_refused(fake_cann, tmp_path, version):
    with pytest.raises(ToolError, match=f"is {version}; edgefuse's op packages target CANN 6.0"):
        build_op_package("Ascend310B4", tmp_path / "opp", env=with_version(fake_cann, version))
    assert not (tmp_path / "opp").exists() and leftovers(tmp_path, "opp") == []


def test_the_package_records_the_toolkit_it_was_built_with(fake_cann, tmp_path):
    package = build_op_package("Ascend310B4", tmp_path / "opp",
                               env=with_version(fake_cann, "7.0.RC1"))
    cann = json.loads((tmp_path / "opp" / "manifest.json").read_text())["cann"]
    assert cann == {"targets": "CANN 6.0 up to, not including, 8.5", "min": "6.0",
                    "below": "8.5", "built_with": "7.0.RC1"}
    assert package.cann_version == "7.0.RC1" and "with CANN 7.0.RC1" in package.summary()


def test_build_sh_itself_refuses_a_toolkit_outside_the_range(fake_cann, tmp_path):
    build_op_package("Ascend310B4", tmp_path / "opp", env=NO_CANN)
    done = subprocess.run(["bash", str(tmp_path / "opp" / "build.sh")], capture_output=True,
                          text=True, env={**os.environ, **with_version(fake_cann, "8.5.0")})
    assert done.returncode == 2
    assert "is CANN 8.5.0; edgefuse's op packages target CANN 6.0" in done.stderr
    assert "--no-custom-ops" in done.stderr


# ---- install.sh: both install layouts ---------------------------------------------------------

CURRENT_INSTALLER = r"""#!/bin/bash
dir="${2#--install-path=}"
mkdir -p "$dir/vendors/edgefuse/bin" && echo "export X=1" > "$dir/vendors/edgefuse/bin/set_env.bash"
echo "[ops_custom] [INFO] using requirements: when custom module install finished or before you \
run the custom module, execute the command [ source $dir/vendors/edgefuse/bin/set_env.bash ] to \
set the environment path"
"""
OLD_INSTALLER = r"""#!/bin/bash
dir="${2#--install-path=}"
mkdir -p "$dir/edgefuse/bin" && echo "export X=1" > "$dir/edgefuse/bin/set_env.bash"
echo "SUCCESS"
"""
SILENT_INSTALLER = "#!/bin/bash\necho SUCCESS\n"


@pytest.mark.parametrize(
    ("installer", "expected"),
    [(CURRENT_INSTALLER, "vendors/edgefuse/bin/set_env.bash"),
     (OLD_INSTALLER, "edgefuse/bin/set_env.bash")],
    ids=["vendors-layout", "older-layout"],
)
def test_install_sh_prints_the_set_env_line_of_either_layout(tmp_path, installer, expected):
    build_op_package("Ascend310B4", tmp_path / "opp", env=NO_CANN)
    run = tmp_path / "opp" / "custom_opp_fake_x86_64.run"
    run.write_text(installer)
    run.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "opp" / "install.sh"), str(tmp_path / "dest")],
                          capture_output=True, text=True, check=True)
    last = done.stdout.splitlines()[-1].strip()
    assert last == f"source {tmp_path / 'dest' / expected}"


def test_install_sh_fails_when_the_installer_wrote_no_set_env(tmp_path):
    build_op_package("Ascend310B4", tmp_path / "opp", env=NO_CANN)
    run = tmp_path / "opp" / "custom_opp_fake_x86_64.run"
    run.write_text(SILENT_INSTALLER)
    run.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "opp" / "install.sh"), str(tmp_path / "dest")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no bin/set_env.bash under" in done.stderr
