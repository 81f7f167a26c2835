"""What the aarch64 rehearsal checks before it starts (qemu's version, binfmt_misc's entries, the
mirror, the root's recipe) and the parts it is made of (the run's root and its mounts, the JSON
Lines watch, the versions it builds), without running an aarch64 program."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgefuse.bundle.rehearsal import rehearse
from edgefuse.bundle.rehearsal_qemu import (
    AARCH64_MAGIC,
    AARCH64_MASK,
    ENTRY,
    find_qemu,
    register,
    registration_line,
)
from edgefuse.bundle.rehearsal_releases import bumped
from edgefuse.bundle.rehearsal_root import RootRecipe, RunRoot, debian_mirror, mounts_under
from edgefuse.bundle.rehearsal_service import _Records
from edgefuse.errors import InputError
from tests.bundle.models import without_app, write_spec

pytestmark = pytest.mark.unit


def _fake_qemu(folder: Path, says: str) -> Path:
    script = folder / "qemu-aarch64"
    script.write_text(f"#!/bin/sh\necho '{says}'\n")
    script.chmod(0o755)
    return script


def test_qemu_older_than_10_is_refused_with_its_version(tmp_path):
    old = _fake_qemu(tmp_path, "qemu-aarch64 version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u16)")
    with pytest.raises(InputError, match=r"qemu-user 7\.2\.19; the rehearsal needs 10 or later "
                                         r"\(qemu-user 7\.2 segfaults importing onnxruntime"):
        find_qemu(old)


def test_a_program_that_is_not_qemu_is_refused(tmp_path):
    with pytest.raises(InputError, match="is not qemu-aarch64"):
        find_qemu(_fake_qemu(tmp_path, "hello"))
    with pytest.raises(InputError, match="cannot be run as qemu-aarch64"):
        find_qemu(tmp_path / "missing")


def test_qemu_10_is_taken_from_path(tmp_path, monkeypatch):
    _fake_qemu(tmp_path, "qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)")
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_qemu()
    assert found.version == (10, 0, 13) and found.path == (tmp_path / "qemu-aarch64").resolve()


def _binfmt(tmp_path: Path) -> Path:
    folder = tmp_path / "binfmt_misc"
    folder.mkdir()
    (folder / "register").write_bytes(b"")
    (folder / "status").write_text("enabled\n")
    return folder


def _entry(folder: Path, name: str, interpreter: str, *, enabled: bool = True,
           magic: bytes = AARCH64_MAGIC, flags: str = "PF") -> None:
    (folder / name).write_text(
        f"{'enabled' if enabled else 'disabled'}\ninterpreter {interpreter}\nflags: {flags}\n"
        f"offset 0\nmagic {magic.hex()}\nmask {AARCH64_MASK.hex()}\n")


def test_registration_is_the_kernels_format_with_fix_binary(tmp_path):
    qemu = find_qemu(_fake_qemu(tmp_path, "qemu-aarch64 version 10.0.0"))
    folder = _binfmt(tmp_path)
    said = register(qemu, folder)
    line = (folder / "register").read_bytes()
    assert line == registration_line(qemu)
    name, kind, offset, magic, mask, interpreter, flags = line.decode().split(":")[1:]
    assert (name, kind, offset, flags) == (ENTRY, "M", "", "PF")
    assert bytes.fromhex(magic.replace("\\x", "")) == AARCH64_MAGIC
    assert bytes.fromhex(mask.replace("\\x", "")) == AARCH64_MASK
    assert interpreter == str(qemu.path)
    assert "registered" in said


def test_our_entry_is_reused_or_replaced(tmp_path):
    qemu = find_qemu(_fake_qemu(tmp_path, "qemu-aarch64 version 10.0.0"))
    folder = _binfmt(tmp_path)
    _entry(folder, ENTRY, str(qemu.path))
    assert "runs" in register(qemu, folder) and (folder / "register").read_bytes() == b""
    _entry(folder, ENTRY, "/usr/bin/qemu-aarch64-old")
    assert "replacing the older one" in register(qemu, folder)
    assert (folder / ENTRY).read_text() == "-1"  # what removes an entry
    assert (folder / "register").read_bytes() == registration_line(qemu)


def test_another_enabled_aarch64_interpreter_is_refused_by_name(tmp_path):
    qemu = find_qemu(_fake_qemu(tmp_path, "qemu-aarch64 version 10.0.0"))
    folder = _binfmt(tmp_path)
    _entry(folder, "qemu-aarch64", "/usr/libexec/qemu-binfmt/aarch64-binfmt-P")
    _entry(folder, "qemu-arm", "/usr/bin/qemu-arm", magic=bytes.fromhex("7f454c46010101"))
    _entry(folder, "old-disabled", "/usr/bin/qemu-aarch64-7", enabled=False)
    with pytest.raises(InputError, match=r"qemu-aarch64 \(/usr/libexec/qemu-binfmt/aarch64-bin"
                                         r"fmt-P\)(?s:.*)echo 0 > .*qemu-aarch64"):
        register(qemu, folder)
    assert (folder / "register").read_bytes() == b""


def test_the_mirror_comes_from_the_machines_own_sources(tmp_path):
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_CODENAME=bookworm\nPRETTY_NAME="Debian 12"\n')
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\nTypes: deb\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert debian_mirror(apt, release) == "http://mirror.example/debian"
    (apt / "sources.list.d" / "debian.sources").unlink()
    (apt / "sources.list").write_text(
        "deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert debian_mirror(apt, release) == "http://other.example/debian"
    release.write_text('ID=ubuntu\nVERSION_CODENAME=noble\nPRETTY_NAME="Ubuntu 24.04"\n')
    with pytest.raises(InputError, match=r"no Debian mirror .*Ubuntu 24\.04(?s:.*)--mirror URL"):
        debian_mirror(apt, release)


def test_the_cached_roots_name_follows_its_recipe():
    plain = RootRecipe()
    assert plain.name.startswith("bookworm-arm64-")
    assert RootRecipe(packages=tuple(reversed(plain.packages))).name == plain.name
    assert RootRecipe(packages=(*plain.packages, "curl")).name != plain.name
    assert RootRecipe(suite="trixie").name != plain.name


@pytest.mark.parametrize(("version", "newer"), [
    ("0.1.0", "0.1.1"), ("1.9", "1.10"), ("2.0.0rc1", "2.0.0rc2"), ("v1-beta", "v2-beta"),
    ("beta", "beta.1")])
def test_versions_are_bumped_at_their_last_number(version, newer):
    assert bumped(version) == newer


def test_the_watch_counts_whole_new_records_and_their_rate(tmp_path):
    path = tmp_path / "frames.jsonl"
    path.write_text(json.dumps({"frame": 0, "time": 1.0}) + "\n")
    records = _Records(path)  # what was there before the start does not count
    with open(path, "a") as handle:
        handle.write(json.dumps({"frame": 1, "time": 10.0}) + "\n" + '{"frame": 2, "ti')
    assert records.count() == 1
    with open(path, "a") as handle:
        handle.write('me": 10.5}\n' + json.dumps({"frame": 3, "time": 11.0}) + "\n")
    assert records.count() == 3
    assert records.fps() == pytest.approx(2.0)
    replacement = tmp_path / "renamed.jsonl"  # a file source's records, renamed into place
    replacement.write_text("".join(json.dumps({"frame": i, "time": 20.0 + i}) + "\n"
                                   for i in range(5)))
    replacement.replace(path)
    assert records.count() == 5 and records.fps() == pytest.approx(1.0)


def test_a_run_root_is_a_copy_or_overlay_with_mounts_and_leaves_nothing(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting an overlay and binding /proc needs root")
    lower = tmp_path / "lower"
    (lower / "usr" / "bin").mkdir(parents=True)
    (lower / "etc").mkdir()
    (lower / "etc" / "hostname").write_text("board\n")
    for overlay in (True, False):
        folder = tmp_path / f"run-{overlay}"
        with RunRoot(lower, folder, overlay=overlay) as run:
            assert run.how == ("overlay" if overlay else "copy")
            assert (run.path / "proc" / "self").exists() and (run.path / "sys" / "kernel").is_dir()
            (run.path / "etc" / "hostname").write_text("changed\n")
            assert len(mounts_under(folder)) >= 3
        assert not folder.exists() and not mounts_under(folder)
        assert (lower / "etc" / "hostname").read_text() == "board\n"
        assert sorted(p.name for p in lower.iterdir()) == ["etc", "usr"]


def test_what_stops_the_rehearsal_before_it_starts(tmp_path):
    spec = write_spec(tmp_path / "spec")
    if os.geteuid() != 0:
        with pytest.raises(InputError, match="needs root") as caught:
            rehearse(spec, tmp_path / "out")
        assert caught.value.reference == "rehearsal-needs-root"
        return
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep").write_text("x")
    with pytest.raises(InputError, match="exists and is not an empty folder"):
        rehearse(spec, busy)
    with pytest.raises(InputError, match=r"--rootfs .* is not a root file system \(no usr/bin\)"):
        rehearse(spec, tmp_path / "out", rootfs=tmp_path)
    no_app = spec.parent / "no-app.yaml"
    no_app.write_text(without_app(spec.read_text()))
    with pytest.raises(InputError, match="has no app: the rehearsal runs the bundle's service"):
        rehearse(no_app, tmp_path / "out2")
    assert (busy / "keep").read_text() == "x"
