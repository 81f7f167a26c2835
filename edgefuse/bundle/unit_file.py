"""A systemd service unit read as systemd reads it, and its ExecStart as a command line to run.

Why: a root file system run under chroot has no systemd, yet the rehearsal must start the app
exactly as the board's systemd would: the command line the installed unit holds (with the drop-ins
of ``NAME.service.d/*.conf`` applied in name order, an empty ``ExecStart=`` clearing the list, as
``systemctl edit`` writes them), as its ``User=``/``Group=``, in its ``WorkingDirectory=``, with its
``Environment=`` and ``EnvironmentFile=`` (files win over ``Environment=``), ``UMask=``,
``NoNewPrivileges=`` and the ``StateDirectory=``-style folders systemd makes for the user.

Not emulated, and said so in docs/fleet.md: the sandbox (``ProtectSystem=`` and the like),
``Type=notify`` and the watchdog, ``Restart=``. The rules followed are systemd.service(5),
systemd.exec(5) and systemd.syntax(7): https://www.freedesktop.org/software/systemd/man/
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from edgefuse.errors import InputError, Ref

UNITS = "etc/systemd/system"
# systemd.exec(5), "Runtime directory" and friends: the setting, its base folder, its variable
DIRECTORIES = {
    "RuntimeDirectory": ("/run", "RUNTIME_DIRECTORY"),
    "StateDirectory": ("/var/lib", "STATE_DIRECTORY"),
    "CacheDirectory": ("/var/cache", "CACHE_DIRECTORY"),
    "LogsDirectory": ("/var/log", "LOGS_DIRECTORY"),
    "ConfigurationDirectory": ("/etc", "CONFIGURATION_DIRECTORY"),
}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_EXEC_PREFIXES = "-@:+!"


@dataclasses.dataclass(frozen=True)
class ServiceUnit:
    name: str  # NAME.service
    files: tuple[str, ...]  # the unit and its drop-ins, root-relative, in the order read
    exec_start: tuple[str, ...]
    user: str | None
    group: str | None
    supplementary_groups: tuple[str, ...]
    working_directory: str | None
    environment: tuple[tuple[str, str], ...]  # Environment=, in order
    environment_files: tuple[tuple[str, bool], ...]  # (path, optional: a leading '-')
    directories: tuple[tuple[str, str], ...]  # (absolute folder, its variable)
    umask: int | None
    no_new_privileges: bool
    timeout_stop_s: float | None


def read_unit(root: Path, name: str, unit_text: str | None = None) -> ServiceUnit:
    """``NAME.service`` as installed in ``root``'s /etc/systemd/system, with its drop-ins.

    ``unit_text``: the unit's own text instead of the installed file (a bundle's unit, before
    the installer has put it in place); the root's drop-ins still apply."""
    unit_path = root / UNITS / name
    if unit_text is None:
        if not unit_path.is_file():
            raise InputError(f"no unit {name} in {root / UNITS}",
                             hint="the installer writes it; was the bundle installed?",
                             reference=Ref.BAD_UNIT_FILE)
        unit_text = unit_path.read_text(encoding="utf-8")
    texts = [(f"/{UNITS}/{name}", unit_text)]
    drop_ins = root / UNITS / f"{name}.d"
    if drop_ins.is_dir():
        texts += [(f"/{UNITS}/{name}.d/{path.name}", path.read_text(encoding="utf-8"))
                  for path in sorted(drop_ins.glob("*.conf"))]
    values: dict[str, list[str]] = {}
    for where, text in texts:
        for key, value in service_settings(text, where):
            if value == "" and key in ("ExecStart", "Environment", "EnvironmentFile",
                                       "SupplementaryGroups", *DIRECTORIES):
                values[key] = []  # an empty assignment resets a list setting
            else:
                values.setdefault(key, []).append(value)
    exec_start = values.get("ExecStart", [])
    if len(exec_start) != 1:
        raise InputError(
            f"{name} has {len(exec_start)} ExecStart= lines after its drop-ins; a service that "
            "is not Type=oneshot has exactly one",
            context="\n".join(where for where, _ in texts),
            hint="a drop-in that replaces the command clears it first with an empty ExecStart=",
            reference=Ref.BAD_UNIT_FILE)
    environment = []
    for line in values.get("Environment", []):
        for word in _words(line, name):
            key, sep, value = word.partition("=")
            if not sep or not _is_name(key):
                raise InputError(f"{name}: Environment= holds '{word}', not NAME=VALUE",
                                 reference=Ref.BAD_UNIT_FILE)
            environment.append((key, value))
    directories = []
    for setting, (base, variable) in DIRECTORIES.items():
        for line in values.get(setting, []):
            for word in line.split():
                folder = word.split(":", 1)[0]
                if folder.startswith("/") or ".." in folder.split("/"):
                    raise InputError(f"{name}: {setting}={word} is not a relative folder",
                                     reference=Ref.BAD_UNIT_FILE)
                directories.append((f"{base}/{folder}", variable))
    return ServiceUnit(
        name=name, files=tuple(where for where, _ in texts),
        exec_start=tuple(_command(exec_start[0], name)),
        user=_last(values, "User"), group=_last(values, "Group"),
        supplementary_groups=tuple(word for line in values.get("SupplementaryGroups", [])
                                   for word in line.split()),
        working_directory=_last(values, "WorkingDirectory"),
        environment=tuple(environment),
        environment_files=tuple((path.removeprefix("-"), path.startswith("-"))
                                for line in values.get("EnvironmentFile", [])
                                for path in line.split()),
        directories=tuple(directories),
        umask=int(_last(values, "UMask"), 8) if _last(values, "UMask") else None,
        no_new_privileges=(_last(values, "NoNewPrivileges") or "no").lower()
        in ("yes", "true", "on", "1"),
        timeout_stop_s=_seconds(_last(values, "TimeoutStopSec"), name),
    )


def service_settings(text: str, where: str) -> list[tuple[str, str]]:
    """(key, value) of the ``[Service]`` section, continuation lines joined, comments dropped."""
    settings = []
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise InputError(f"{where}: '{line}' is neither a [section] nor KEY=VALUE",
                             reference=Ref.BAD_UNIT_FILE)
        if section == "Service":
            settings.append((key.strip(), value.strip()))
    return settings


def _last(values: Mapping[str, list[str]], key: str) -> str | None:
    found = values.get(key)
    return found[-1] if found else None


def _is_name(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) is not None


def _words(text: str, name: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{name}: cannot split '{text}' into words ({exc})",
                         reference=Ref.BAD_UNIT_FILE) from exc


def _command(text: str, name: str) -> list[str]:
    """ExecStart's words: systemd's prefixes (which change nothing for one run) dropped, %%
    made %, any other specifier refused: the rehearsal does not guess what systemd fills in."""
    stripped = text.lstrip(_EXEC_PREFIXES)
    if "!" in text[:len(text) - len(stripped)] or "+" in text[:len(text) - len(stripped)]:
        raise InputError(f"{name}: ExecStart={text} runs with full privileges ('+', '!'), "
                         "which the rehearsal does not emulate", reference=Ref.BAD_UNIT_FILE)
    words = _words(stripped, name)
    for word in words:
        if re.search(r"%[^%]", word.replace("%%", "")):
            raise InputError(f"{name}: ExecStart= word '{word}' has a systemd specifier the "
                             "rehearsal does not fill in", reference=Ref.BAD_UNIT_FILE)
    if not words or not words[0].startswith("/"):
        raise InputError(f"{name}: ExecStart={text} does not start with an absolute path",
                         reference=Ref.BAD_UNIT_FILE)
    return [word.replace("%%", "%") for word in words]


def _seconds(text: str | None, name: str) -> float | None:
    """A systemd time span (``90``, ``90s``, ``1min 30s``, ``infinity``) in seconds."""
    if text is None or text == "infinity":
        return None
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text):
        if unit not in units:
            raise InputError(f"{name}: cannot read the time span '{text}'",
                             reference=Ref.BAD_UNIT_FILE)
        total += float(number) * units[unit]
    return total


def read_environment_file(text: str) -> list[tuple[str, str]]:
    """``NAME=VALUE`` lines as systemd's EnvironmentFile= reads them: comments, blank lines,
    single or double quotes (backslash escapes inside double quotes)."""
    pairs = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _is_name(key):
            continue  # systemd ignores such a line with a warning
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.append((key, value))
    return pairs


@dataclasses.dataclass(frozen=True)
class Account:
    uid: int
    gid: int
    home: str
    shell: str


def account(root: Path, user: str) -> Account | None:
    """``user``'s entry in ``root``'s /etc/passwd."""
    passwd = root / "etc" / "passwd"
    if not passwd.is_file():
        return None
    for line in passwd.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[0] == user:
            return Account(int(fields[2]), int(fields[3]), fields[5], fields[6])
    return None


def _groups(root: Path) -> list[tuple[str, int, list[str]]]:
    """(name, gid, members) of every group in ``root``'s /etc/group."""
    groups = root / "etc" / "group"
    found = []
    if groups.is_file():
        for line in groups.read_text(encoding="utf-8", errors="replace").splitlines():
            fields = line.split(":")
            if len(fields) >= 4 and fields[2].isdigit():
                found.append((fields[0], int(fields[2]), [m for m in fields[3].split(",") if m]))
    return found


def group_id(root: Path, group: str) -> int | None:
    """``group``'s id in ``root``'s /etc/group."""
    return next((gid for name, gid, _ in _groups(root) if name == group), None)


def supplementary_groups(unit: ServiceUnit, root: Path) -> list[str]:
    """The groups systemd gives the service: the user's (``initgroups``), then the unit's
    SupplementaryGroups=, each of which must exist."""
    known = _groups(root)
    names = [name for name, _, members in known if unit.user in members]
    for group in unit.supplementary_groups:
        if not any(name == group for name, _, _ in known):
            raise InputError(f"{unit.name}: SupplementaryGroups={group} names a group that does "
                             "not exist in the root (systemd refuses to start it too)",
                             hint=f"create it on the board image (groupadd {group}) or drop it "
                                  "from service.supplementary_groups",
                             reference=Ref.BAD_UNIT_FILE)
        if group not in names:
            names.append(group)
    return names


def environment(unit: ServiceUnit, root: Path,
                locate: Callable[[str], Path] | None = None) -> dict[str, str]:
    """The environment systemd gives the service: its own variables (PATH, USER, HOME, ...,
    STATE_DIRECTORY), then Environment=, then the EnvironmentFile= files, in order.

    ``locate``: where an absolute path of the root is read from here (default: under ``root``);
    a release about to be installed has its files elsewhere."""
    values = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    if unit.user is not None:
        values.update(USER=unit.user, LOGNAME=unit.user)
        entry = account(root, unit.user)
        if entry is not None:
            values.update(HOME=entry.home, SHELL=entry.shell)
    by_variable: dict[str, list[str]] = {}
    for folder, variable in unit.directories:
        by_variable.setdefault(variable, []).append(folder)
    values.update({variable: ":".join(folders) for variable, folders in by_variable.items()})
    values.update(unit.environment)
    for path, optional in unit.environment_files:
        file = locate(path) if locate is not None else root / path.lstrip("/")
        if not file.is_file():
            if optional:
                continue
            raise InputError(f"{unit.name}: its EnvironmentFile {path} does not exist in the root",
                             reference=Ref.BAD_UNIT_FILE)
        values.update(read_environment_file(file.read_text(encoding="utf-8")))
    return values


def make_directories(unit: ServiceUnit, root: Path) -> None:
    """What systemd makes before the start: each StateDirectory= (and the like), the last part
    owned by the service's user and group, mode 0755."""
    entry = account(root, unit.user) if unit.user is not None else None
    if unit.user is not None and entry is None:
        raise InputError(f"{unit.name} runs as User={unit.user}, who does not exist in the root",
                         hint="the installer creates the service user; was the bundle installed?",
                         reference=Ref.BAD_UNIT_FILE)
    gid = group_id(root, unit.group) if unit.group is not None else None
    for folder, _ in unit.directories:
        path = root / folder.lstrip("/")
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
        if entry is not None:
            os.chown(path, entry.uid, entry.gid if gid is None else gid)


def shell_command(unit: ServiceUnit, root: Path, env: Mapping[str, str],
                  extra_args: Sequence[str] = ()) -> str:
    """One ``sh -c`` command line that starts the service inside the root as its unit says:
    umask, then ``setpriv`` to the user (with its groups, no new privileges where the unit says
    so), then ``env -i`` with exactly the service's environment, in its working directory."""
    words: list[str] = []
    if unit.user is not None:
        words += ["setpriv", f"--reuid={unit.user}", f"--regid={unit.group or unit.user}"]
        groups = supplementary_groups(unit, root)
        words.append(f"--groups={','.join(groups)}" if groups else "--clear-groups")
        if unit.no_new_privileges:
            words.append("--no-new-privs")
        words.append("--")
    words += ["env", "-i"]
    if unit.working_directory is not None:
        words += ["-C", unit.working_directory.lstrip("-")]
    words += [f"{key}={value}" for key, value in env.items()]
    words += [*unit.exec_start, *extra_args]
    umask = f"umask {unit.umask:04o} && " if unit.umask is not None else ""
    return umask + "exec " + shlex.join(words)


def drop_in(exec_start: Sequence[str]) -> str:
    """A drop-in that replaces the command line, as ``systemctl edit`` would hold it."""
    return ("# written by `edgefuse bundle rehearse`: the service's command line with the\n"
            "# rehearsal's source (`systemctl edit` on a board writes the same)\n"
            "[Service]\nExecStart=\nExecStart=" + shlex.join(exec_start) + "\n")
