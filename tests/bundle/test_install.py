"""install.sh and its Python twin refuse every unsafe or damaged input and install nothing then;
a good bundle installs beside the old version, switches atomically, rolls back, and the card
maker's hook installs it into a root file system idempotently.

Everything runs against temporary roots (``install.sh --root``), never the real /.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from edgefuse.bundle.builder import build
from edgefuse.bundle.bundle_check import verify_bundle, verify_tree
from edgefuse.cli.main import main
from edgefuse.errors import InputError
from tests.bundle.models import write_spec
from tests.bundle.trust import TOP, run_install, state

pytestmark = pytest.mark.ort


def test_install_switches_current_and_enables_the_service(small_build, root):
    done = run_install(small_build.install_sh, root, str(small_build.archive))
    assert done.returncode == 0, done.stderr
    prefix = root / "opt/edgefuse/small"
    current = os.readlink(prefix / "current")
    assert current.startswith("releases/small-1.0.0-")
    assert (prefix / current / "models/seg/model.onnx").is_file()
    wants = root / "etc/systemd/system/multi-user.target.wants/edgefuse-small.service"
    assert os.readlink(wants) == "/etc/systemd/system/edgefuse-small.service"
    assert (root / "etc/systemd/system/edgefuse-small.service").is_file()
    before = state(root)
    again = run_install(small_build.install_sh, root, str(small_build.archive))
    assert again.returncode == 0 and state(root) == before  # idempotent


def test_install_from_the_bundle_folder_itself(small_build, root):
    done = subprocess.run(["bash", str(small_build.bundle / "install.sh"), "--root", str(root),
                           "--no-python"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (root / "opt/edgefuse/small/current/MANIFEST.json").is_file()


def test_a_new_version_installs_beside_the_old_and_rolls_back(small_build, root, tmp_path):
    spec = write_spec(tmp_path / "v2", version="2.0.0")
    v2 = build(spec, tmp_path / "out2", cache_dir=small_build.cache, progress=False)
    prefix = root / "opt/edgefuse/small"
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    first = os.readlink(prefix / "current")
    done = run_install(tmp_path / "out2/install.sh", root, str(v2.archive))
    assert done.returncode == 0, done.stderr
    second = os.readlink(prefix / "current")
    assert second.startswith("releases/small-2.0.0-")
    assert os.readlink(prefix / "previous") == first
    rolled = run_install(tmp_path / "out2/install.sh", root, "--rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert os.readlink(prefix / "current") == first
    assert os.readlink(prefix / "previous") == second


def test_rollback_without_a_previous_version_is_refused(small_build, root):
    done = run_install(small_build.install_sh, root, "--rollback")
    assert done.returncode == 2 and "no previous version" in done.stderr


# ---- tampering -------------------------------------------------------------------------------


def test_tampering_with_any_file_is_caught(small_build, tmp_path):
    files = sorted(p.relative_to(small_build.bundle) for p in small_build.bundle.rglob("*")
                   if p.is_file())
    assert len(files) > 20
    for relative in files:
        bundle = tmp_path / "b"
        shutil.copytree(small_build.bundle, bundle)
        target = bundle / relative
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
        with pytest.raises(InputError, match=r"modified|do not match"):
            verify_tree(bundle)
        shutil.rmtree(bundle)


@pytest.mark.parametrize("relative", ["models/seg/model.onnx", "MANIFEST.json",
                                      "wheels/edgefuse-0.1.0-py3-none-any.whl",
                                      "wheels/numpy-1.24-py3-none-any.whl", "requirements.lock",
                                      "app/config.yaml",
                                      "install.sh"])
def test_install_sh_refuses_a_tampered_bundle_and_installs_nothing(small_build, tmp_path, root,
                                                                   relative):
    bundle = tmp_path / TOP
    shutil.copytree(small_build.bundle, bundle)
    target = bundle / relative
    data = bytearray(target.read_bytes())
    data[-2] ^= 0x01
    target.write_bytes(bytes(data))
    before = state(root)
    done = run_install(small_build.install_sh, root, str(bundle))
    assert done.returncode == 2
    assert "modified" in done.stderr or "does not match" in done.stderr, done.stderr
    assert state(root) == before


def test_a_manifest_edited_outside_its_file_list_fails_its_own_digest(small_build, tmp_path,
                                                                     root):
    """Only MANIFEST.json's self-digest can see this: every file still matches its listed
    digest, the list is whole, the JSON valid; the service would just run as root."""
    bundle = tmp_path / TOP
    shutil.copytree(small_build.bundle, bundle)
    manifest = bundle / "MANIFEST.json"
    text = manifest.read_text()
    assert text.count('"user": "HwHiAiUser"') == 1
    manifest.write_text(text.replace('"user": "HwHiAiUser"', '"user": "root"'))
    with pytest.raises(InputError, match=r"MANIFEST.json was modified \(its digest does not "
                                         r"match\)"):
        verify_tree(bundle)
    done = run_install(small_build.install_sh, root, str(bundle))
    assert done.returncode == 2
    assert "MANIFEST.json was modified (its digest does not match)" in done.stderr, done.stderr
    assert state(root) == {"etc": "dir", "etc/systemd": "dir", "etc/systemd/system": "dir"}


@pytest.mark.parametrize("change", ["extra", "missing", "symlink"])
def test_unlisted_missing_and_linked_files_are_refused(small_build, tmp_path, root, change):
    bundle = tmp_path / TOP
    shutil.copytree(small_build.bundle, bundle)
    if change == "extra":
        (bundle / "models/seg/extra.bin").write_bytes(b"x")
    elif change == "missing":
        (bundle / "models/cls/golden.npz").unlink()
    else:
        (bundle / "models/seg/link").symlink_to("/etc/passwd")
    done = run_install(small_build.install_sh, root, str(bundle))
    assert done.returncode == 2 and "error:" in done.stderr
    assert state(root) == {"etc": "dir", "etc/systemd": "dir", "etc/systemd/system": "dir"}
    with pytest.raises(InputError):
        verify_tree(bundle)


# ---- unsafe archives -------------------------------------------------------------------------


def _archive_with(small_build, path: Path, extra: tarfile.TarInfo, data: bytes = b"") -> Path:
    """The real bundle's archive plus one more member."""
    with tarfile.open(small_build.archive) as source, tarfile.open(path, "w:gz") as out:
        for member in source.getmembers():
            out.addfile(member, source.extractfile(member) if member.isfile() else None)
        extra.size = len(data) if extra.isfile() else 0
        out.addfile(extra, io.BytesIO(data) if extra.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


UNSAFE = {
    "traversal": (_member(f"{TOP}/../evil.sh"), r"climbs out with '\.\.'"),
    "absolute": (_member("/tmp/edgefuse-evil.sh"), r"absolute path"),
    "symlink-escape": (_member(f"{TOP}/models/escape", tarfile.SYMTYPE, "../../../etc/passwd"),
                       r"models/escape' is a symlink"),
    "symlink-absolute": (_member(f"{TOP}/models/abs", tarfile.SYMTYPE, "/etc/passwd"),
                         r"models/abs' is a symlink"),
    "hardlink-escape": (_member(f"{TOP}/models/hard", tarfile.LNKTYPE, "etc/passwd"),
                        r"models/hard' is a hard link"),
    # a link that stays inside is refused too: a bundle never has one, and chains of links
    # checked one by one is how tarfile's data filter was bypassed (CVE-2025-4517)
    "symlink-inside": (_member(f"{TOP}/models/in", tarfile.SYMTYPE, "seg/model.onnx"),
                       r"models/in' is a symlink"),
    "hardlink-inside": (_member(f"{TOP}/models/hin", tarfile.LNKTYPE, f"{TOP}/install.sh"),
                        r"models/hin' is a hard link"),
    "device": (_member(f"{TOP}/models/dev", tarfile.CHRTYPE), r"device, fifo or other special"),
    "fifo": (_member(f"{TOP}/models/fifo", tarfile.FIFOTYPE), r"device, fifo or other special"),
    "outside-top": (_member("other/file.txt"), r"outside the bundle's folder"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_an_unsafe_archive_is_refused_before_anything_is_extracted(small_build, tmp_path, root,
                                                                   case):
    member, message = UNSAFE[case]
    archive = _archive_with(small_build, tmp_path / "bad.tar.gz", member,
                            b"#!/bin/sh\n" if member.isfile() else b"")
    before = state(root)
    done = run_install(small_build.install_sh, root, str(archive))
    assert done.returncode == 2, done.stderr
    assert "unsafe archive" in done.stderr
    assert re.search(message, done.stderr), done.stderr
    assert state(root) == before
    assert not Path("/tmp/edgefuse-evil.sh").exists() and not (tmp_path / "evil.sh").exists()
    with pytest.raises(InputError, match=message):
        verify_bundle(archive, run_models=False)


def test_a_truncated_archive_is_refused(small_build, tmp_path, root, capsys):
    data = small_build.archive.read_bytes()
    archive = tmp_path / "cut.tar.gz"
    archive.write_bytes(data[: len(data) // 2])
    done = run_install(small_build.install_sh, root, str(archive))
    assert done.returncode == 2 and "truncated" in done.stderr
    assert state(root) == {"etc": "dir", "etc/systemd": "dir", "etc/systemd/system": "dir"}
    with pytest.raises(InputError, match=r"truncated"):
        verify_bundle(archive, run_models=False)
    assert main(["bundle", "verify", str(archive), "--no-run"]) == 2
    assert "error[truncated-archive]" in capsys.readouterr().err


def test_the_published_archive_digest_is_checked(small_build, root):
    done = run_install(small_build.install_sh, root, "--expect-sha256", "0" * 64,
                    str(small_build.archive))
    assert done.returncode == 2 and "--expect-sha256" in done.stderr
    good = small_build.outcome.archive_sha256
    assert run_install(small_build.install_sh, root, "--expect-sha256", good,
                    str(small_build.archive)).returncode == 0


# ---- the card maker's hook -------------------------------------------------------------------


def _rootfs(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    for folder in ("etc/systemd/system", "lib/systemd/system", "usr/bin", "var", "opt", "home"):
        (rootfs / folder).mkdir(parents=True)
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n"
                                       "HwHiAiUser:x:1000:1000::/home/HwHiAiUser:/bin/bash\n")
    (rootfs / "etc/os-release").write_text('NAME="Ubuntu"\nVERSION_ID="22.04"\n')
    return rootfs


def test_the_minirc_hook_installs_into_a_rootfs_and_is_idempotent(small_build, tmp_path):
    rootfs = _rootfs(tmp_path)
    (rootfs / "var/minirc_hook.sh").write_text("#!/bin/bash\necho other first-boot step\n")
    hook = small_build.bundle / "minirc_install_hook.sh"
    done = subprocess.run(["bash", str(hook), str(rootfs)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    wants = rootfs / "etc/systemd/system/multi-user.target.wants/edgefuse-small.service"
    assert os.readlink(wants) == "/etc/systemd/system/edgefuse-small.service"
    assert (rootfs / "opt/edgefuse/small/current/MANIFEST.json").is_file()
    first_boot = (rootfs / "var/minirc_hook.sh").read_text()
    assert first_boot.startswith("#!/bin/bash\necho other first-boot step\n")
    assert "bash /opt/edgefuse/small/current/install.sh --finish" in first_boot
    assert os.access(rootfs / "var/minirc_hook.sh", os.X_OK)
    before = state(rootfs)
    again = subprocess.run(["bash", str(hook), str(rootfs)], capture_output=True, text=True,
                           check=False)
    assert again.returncode == 0, again.stderr
    assert state(rootfs) == before
    assert (rootfs / "var/minirc_hook.sh").read_text().count("# >>> edgefuse small-1.0.0") == 1


def test_the_minirc_hook_finds_the_bundle_next_to_it_as_the_card_maker_holds_it(small_build,
                                                                                tmp_path):
    maker = tmp_path / "card-maker"
    maker.mkdir()
    shutil.copytree(small_build.bundle, maker / TOP)
    shutil.copy(small_build.bundle / "minirc_install_hook.sh", maker / "minirc_install_hook.sh")
    rootfs = _rootfs(tmp_path)
    done = subprocess.run(["bash", str(maker / "minirc_install_hook.sh"), str(rootfs)],
                          capture_output=True, text=True, check=False, cwd=maker)
    assert done.returncode == 0, done.stderr
    assert (rootfs / "var/minirc_hook.sh").is_file()


def test_the_minirc_hook_refuses_a_tampered_bundle(small_build, tmp_path):
    bundle = tmp_path / TOP
    shutil.copytree(small_build.bundle, bundle)
    (bundle / "models/seg/model.onnx").write_bytes(b"not a model")
    rootfs = _rootfs(tmp_path)
    before = state(rootfs)
    done = subprocess.run(["bash", str(bundle / "minirc_install_hook.sh"), str(rootfs)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "does not match" in done.stderr
    assert state(rootfs) == before
