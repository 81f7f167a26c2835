"""The service unit read as systemd reads it (drop-ins, resets, environment files) and turned into
the command line the rehearsal runs in the root; checked against hand-written units and against
the unit `edgefuse build` writes."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from edgefuse.bundle.service import VERBS, unit_file
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.unit_file import (
    drop_in,
    environment,
    make_directories,
    read_environment_file,
    read_unit,
    shell_command,
)
from edgefuse.errors import InputError
from tests.bundle.models import write_spec

pytestmark = pytest.mark.unit

UNIT = """\
[Unit]
Description=demo
ExecStart=/not/the/service/section
[Service]
Type=notify
User=app
Group=app
SupplementaryGroups=video
WorkingDirectory=/opt/demo/current
Environment=A=1 "B=two words"
EnvironmentFile=/opt/demo/current/env/demo.env
EnvironmentFile=-/etc/default/missing
ExecStart=/opt/demo/current/.venv/bin/edgefuse detect \\
    --config /opt/demo/current/app/config.yaml
StateDirectory=edgefuse/demo
LogsDirectory=edgefuse/demo
UMask=0027
NoNewPrivileges=yes
TimeoutStopSec=1min 30s
"""


@pytest.fixture
def root(tmp_path) -> Path:
    folder = tmp_path / "root"
    (folder / "etc/systemd/system").mkdir(parents=True)
    (folder / "etc/systemd/system/demo.service").write_text(UNIT)
    (folder / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n"
                                       "app:x:999:998::/nonexistent:/usr/sbin/nologin\n")
    (folder / "etc/group").write_text("root:x:0:\nvideo:x:44:\napp:x:998:\naudio:x:29:app\n")
    env = folder / "opt/demo/current/env"
    env.mkdir(parents=True)
    (env / "demo.env").write_text('# comment\nB=from-file\nC="quoted \\"value\\""\nPATH=/x:/y\n')
    return folder


def test_the_service_section_is_read_with_continuations_and_time_spans(root):
    unit = read_unit(root, "demo.service")
    assert unit.exec_start == ("/opt/demo/current/.venv/bin/edgefuse", "detect", "--config",
                               "/opt/demo/current/app/config.yaml")
    assert (unit.user, unit.group, unit.supplementary_groups) == ("app", "app", ("video",))
    assert unit.working_directory == "/opt/demo/current"
    assert unit.environment == (("A", "1"), ("B", "two words"))
    assert unit.environment_files == (("/opt/demo/current/env/demo.env", False),
                                      ("/etc/default/missing", True))
    assert unit.directories == (("/var/lib/edgefuse/demo", "STATE_DIRECTORY"),
                                ("/var/log/edgefuse/demo", "LOGS_DIRECTORY"))
    assert (unit.umask, unit.no_new_privileges, unit.timeout_stop_s) == (0o027, True, 90.0)


def test_a_drop_in_replaces_the_command_after_clearing_it(root):
    folder = root / "etc/systemd/system/demo.service.d"
    folder.mkdir()
    (folder / "10-source.conf").write_text(drop_in(["/bin/app", "--source", "a b.mp4"]))
    (folder / "20-env.conf").write_text("[Service]\nEnvironment=\nEnvironment=D=4\n")
    unit = read_unit(root, "demo.service")
    assert unit.exec_start == ("/bin/app", "--source", "a b.mp4")
    assert unit.environment == (("D", "4"),)  # the empty assignment reset the list
    assert unit.files[-2:] == ("/etc/systemd/system/demo.service.d/10-source.conf",
                               "/etc/systemd/system/demo.service.d/20-env.conf")


def test_two_commands_without_a_reset_are_refused(root):
    folder = root / "etc/systemd/system/demo.service.d"
    folder.mkdir()
    (folder / "override.conf").write_text("[Service]\nExecStart=/bin/other\n")
    with pytest.raises(InputError, match=r"(?s)2 ExecStart= lines .* clears it first"):
        read_unit(root, "demo.service")


@pytest.mark.parametrize(("line", "match"), [
    ("ExecStart=/bin/app %i", "specifier"),
    ("ExecStart=+/bin/app", "full privileges"),
    ("ExecStart=app --x", "absolute path"),
    ("Environment=not-a-pair", "not NAME=VALUE"),
    ("StateDirectory=/abs", "not a relative folder"),
])
def test_what_the_rehearsal_cannot_run_as_systemd_would_is_refused(root, line, match):
    text = UNIT.replace("UMask=0027", "ExecStart=\n" + line if line.startswith("ExecStart")
                        else line)
    (root / "etc/systemd/system/demo.service").write_text(text)
    with pytest.raises(InputError, match=match):
        read_unit(root, "demo.service")


def test_the_environment_is_systemds_then_environment_then_the_files(root):
    unit = read_unit(root, "demo.service")
    env = environment(unit, root)
    assert env["B"] == "from-file"  # the file wins over Environment=
    assert env["A"] == "1" and env["C"] == 'quoted "value"' and env["PATH"] == "/x:/y"
    assert (env["USER"], env["HOME"], env["SHELL"]) == ("app", "/nonexistent",
                                                        "/usr/sbin/nologin")
    assert env["STATE_DIRECTORY"] == "/var/lib/edgefuse/demo"
    (root / "opt/demo/current/env/demo.env").unlink()
    with pytest.raises(InputError, match="EnvironmentFile .* does not exist"):
        environment(unit, root)


def test_environment_files_quote_as_systemd_reads_them():
    text = "A='single # kept'\nB=\"x\\\\y\"\n;comment\n bad line\nC = spaced \n"
    assert read_environment_file(text) == [("A", "single # kept"), ("B", "x\\y"),
                                           ("C", "spaced")]


def test_the_command_line_switches_user_groups_and_folder(root):
    unit = read_unit(root, "demo.service")
    command = shell_command(unit, root, {"K": "v w"}, ["--max-frames", "3"])
    umask, _, rest = command.partition(" && exec ")
    assert umask == "umask 0027"
    assert shlex.split(rest) == [
        "setpriv", "--reuid=app", "--regid=app", "--groups=audio,video", "--no-new-privs", "--",
        "env", "-i", "-C", "/opt/demo/current", "K=v w",
        "/opt/demo/current/.venv/bin/edgefuse", "detect", "--config",
        "/opt/demo/current/app/config.yaml", "--max-frames", "3"]


def test_a_missing_supplementary_group_or_user_is_refused(root):
    (root / "etc/group").write_text("app:x:998:\n")
    unit = read_unit(root, "demo.service")
    with pytest.raises(InputError, match="SupplementaryGroups=video .* does not exist"):
        shell_command(unit, root, {})
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(InputError, match="User=app, who does not exist"):
        make_directories(unit, root)


def test_state_folders_are_made_for_the_service_user(root):
    unit = read_unit(root, "demo.service")
    make_directories(unit, root)
    state = root / "var/lib/edgefuse/demo"
    assert state.is_dir() and (root / "var/log/edgefuse/demo").is_dir()
    if state.stat().st_uid == 0 and Path("/proc/self").stat().st_uid != 0:
        pytest.skip("not root: the folders cannot be given to another user here")
    assert (state.stat().st_uid, state.stat().st_gid) == (999, 998)


def test_the_unit_edgefuse_build_writes_reads_back(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec"))
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    unit = read_unit(root, "edgefuse-small.service", unit_file(spec))
    assert unit.exec_start[0] == f"{spec.prefix}/current/.venv/bin/edgefuse"
    assert unit.exec_start[1:] == (VERBS[spec.app["kind"]], "--config",
                                   f"{spec.prefix}/current/app/config.yaml")
    assert unit.user == spec.service["user"]
    assert unit.working_directory == f"{spec.prefix}/current"
    assert unit.environment_files == ((f"{spec.prefix}/current/env/edgefuse-small.env", False),)
