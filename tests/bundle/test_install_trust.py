"""Regression tests of issue 18's findings: what a fleet relies on the installer for.

Each test reproduces an attack or a fault against install.sh (run for real, with ``--root`` into
temporary roots, or a temporary install prefix where the Python environment is built) and
``bundle verify``; each failed before its fix.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tarfile
from pathlib import Path

import pytest

from edgefuse.bundle.bundle_check import verify_bundle, verify_tree
from edgefuse.bundle.signing import key_fingerprint
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_problems import SpecError
from edgefuse.cli.main import main
from edgefuse.errors import InputError
from tests.bundle.models import write_spec
from tests.bundle.trust import (
    PREFIX,
    TOP,
    build_version,
    current_release,
    host_python3,
    prefix_builds,
    rewrite_manifest,
    run_install,
    shim,
    state,
    with_member,
)

pytestmark = pytest.mark.ort



@pytest.fixture(scope="module")
def signed(small_build, keys, tmp_path_factory):
    """v1 and v2 of the small bundle, signed with the release key."""
    root = tmp_path_factory.mktemp("signed")
    return {version: build_version(small_build, root / version, version,
                                   key=keys["release"][0])
            for version in ("1.0.0", "2.0.0")}


def _trust(root: Path, public: Path) -> None:
    (root / "etc/edgefuse/keys").mkdir(parents=True, exist_ok=True)
    shutil.copy(public, root / "etc/edgefuse/keys" / public.name)


def _tar(folder: Path, top: str, path: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        archive.add(folder, arcname=top)
    return path


# ---- 1. code outside the digests ----------------------------------------------------------------


def test_a_planted_venv_in_the_archive_is_refused(small_build, tmp_path, root):
    """The real archive plus TOP/.venv/bin/edgefuse, a script the unit would run."""
    archive = with_member(small_build.archive, tmp_path / "planted.tar.gz",
                          f"{TOP}/.venv/bin/edgefuse", b"#!/bin/sh\necho planted\n")
    before = state(root)
    done = run_install(small_build.install_sh, root, str(archive))
    assert done.returncode == 2 and ".venv/bin/edgefuse" in done.stderr, done.stderr
    assert state(root) == before
    with pytest.raises(InputError, match=r"\.venv"):
        verify_bundle(archive, run_models=False)


def test_a_venv_link_in_a_bundle_folder_is_refused(small_build, tmp_path, root):
    bundle = tmp_path / TOP
    shutil.copytree(small_build.bundle, bundle)
    outside = tmp_path / "elsewhere" / "bin"
    outside.mkdir(parents=True)
    (bundle / ".venv").symlink_to(outside.parent)
    done = run_install(small_build.install_sh, root, str(bundle))
    assert done.returncode == 2 and ".venv" in done.stderr, done.stderr
    assert not (root / PREFIX).exists()
    with pytest.raises(InputError, match=r"\.venv"):
        verify_tree(bundle)


def test_a_venv_planted_into_an_installed_release_is_refused_on_rollback(small_build, tmp_path,
                                                                        root):
    v2 = build_version(small_build, tmp_path / "v2", "2.0.0")
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    assert run_install(v2.output_dir / "install.sh", root, str(v2.archive)).returncode == 0
    previous = root / PREFIX / os.readlink(root / PREFIX / "previous")
    (previous / ".venv/bin").mkdir(parents=True)
    (previous / ".venv/bin/edgefuse").write_text("#!/bin/sh\necho planted\n")
    done = run_install(v2.output_dir / "install.sh", root, "--rollback")
    assert done.returncode == 2 and "not the Python environment" in done.stderr, done.stderr
    assert current_release(root).startswith("releases/small-2.0.0-")
    with pytest.raises(InputError, match=r"not the Python environment"):
        verify_tree(previous)


def test_a_venv_link_whose_listing_matches_the_record_is_refused_on_rollback(small_build,
                                                                            tmp_path, root):
    """An installed release's .venv swapped for a link to a folder elsewhere, with a record
    that lists exactly that link (as the installer's listing prints a link): the listing
    matches, but a link is never the environment the installer built; refused."""
    v2 = build_version(small_build, tmp_path / "v2", "2.0.0")
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    assert run_install(v2.output_dir / "install.sh", root, str(v2.archive)).returncode == 0
    previous = root / PREFIX / os.readlink(root / PREFIX / "previous")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "bin").mkdir(parents=True)
    (previous / ".venv").symlink_to(elsewhere)
    record = root / PREFIX / "venv-digests" / f"{previous.name}.sha256"
    record.parent.mkdir(exist_ok=True)
    record.write_text(f"link  .venv -> {elsewhere}\n")
    done = run_install(v2.output_dir / "install.sh", root, "--rollback")
    assert done.returncode == 2 and "not the Python environment" in done.stderr, done.stderr
    assert current_release(root).startswith("releases/small-2.0.0-")


# ---- 2. and 5.: the Python environment, built where it runs, before the switch ------------------


@pytest.mark.slow
def test_the_python_environment_runs_from_where_it_was_built(small_build, tmp_path):
    prefix, (v1,) = prefix_builds(small_build, tmp_path, "1.0.0")
    env = host_python3(tmp_path)
    done = run_install(v1.output_dir / "install.sh", None, str(v1.archive), env=env, python=True)
    assert done.returncode == 0, done.stderr
    release = (prefix / "current").resolve()
    script = release / ".venv/bin/edgefuse"
    ran = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]})
    assert ran.returncode == 0 and ran.stdout.startswith("edgefuse "), ran.stderr
    # the installed release, environment included, still checks out (and rolls back to)
    record = prefix / "venv-digests" / f"{release.name}.sha256"
    assert record.is_file()
    verify_tree(prefix / "current")


def test_a_failing_environment_build_leaves_current_on_the_old_release(small_build, tmp_path):
    prefix, (v1, v2) = prefix_builds(small_build, tmp_path, "1.0.0", "2.0.0")
    assert run_install(v1.output_dir / "install.sh", None, str(v1.archive)).returncode == 0
    first = os.readlink(prefix / "current")
    env = shim(tmp_path / "bin", "python3", "echo 'no python here' >&2; exit 1\n")
    done = run_install(v2.output_dir / "install.sh", None, str(v2.archive), env=env, python=True)
    assert done.returncode == 1 and "could not be built" in done.stderr, done.stderr
    assert os.readlink(prefix / "current") == first
    assert not (prefix / "previous").exists() or os.readlink(prefix / "previous") == first


# ---- 3. signatures and downgrades ---------------------------------------------------------------


def test_a_signed_bundle_installs_where_its_key_is_trusted(signed, keys, root):
    _trust(root, keys["release"][1])
    v1 = signed["1.0.0"]
    done = run_install(v1.output_dir / "install.sh", root, str(v1.archive))
    assert done.returncode == 0, done.stderr
    assert (root / PREFIX / "current/MANIFEST.sig").is_file()
    report = verify_bundle(v1.archive, run_models=False, keys=[keys["release"][1]])
    assert report.bundle_id == TOP
    openssl = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey",
                              str(keys["release"][1]), "-rawin", "-in",
                              str(v1.bundle_dir / "MANIFEST.json"), "-sigfile",
                              str(v1.bundle_dir / "MANIFEST.sig")], capture_output=True,
                             check=False)
    assert openssl.returncode == 0  # a board's stock openssl agrees


def test_an_unsigned_bundle_is_refused_where_keys_are_trusted(small_build, keys, root, capsys):
    _trust(root, keys["release"][1])
    before = state(root)
    done = run_install(small_build.install_sh, root, str(small_build.archive))
    assert done.returncode == 2 and "is not signed" in done.stderr, done.stderr
    assert state(root) == before
    assert main(["bundle", "verify", str(small_build.archive), "--no-run", "--key",
                 str(keys["release"][1])]) == 2
    assert "error[bad-signature]" in capsys.readouterr().err


def test_a_bundle_signed_with_another_key_is_refused(small_build, keys, root, tmp_path):
    other = build_version(small_build, tmp_path / "other", "1.0.0", key=keys["attacker"][0])
    _trust(root, keys["release"][1])
    before = state(root)
    done = run_install(other.output_dir / "install.sh", root, str(other.archive))
    assert done.returncode == 2 and "matches no trusted key" in done.stderr, done.stderr
    assert state(root) == before
    with pytest.raises(InputError, match=r"matches no trusted key"):
        verify_bundle(other.archive, run_models=False, keys=[keys["release"][1]])


def test_a_planted_file_with_a_recomputed_manifest_digest_is_refused(signed, keys, root,
                                                                     tmp_path):
    """The self-digest is integrity only: anyone can list a new file and recompute it."""
    bundle = tmp_path / TOP
    shutil.copytree(signed["1.0.0"].bundle_dir, bundle)
    (bundle / "app/evil.py").write_text("import os\n")
    digest = hashlib.sha256(b"import os\n").hexdigest()
    rewrite_manifest(bundle, lambda data: data["files"].__setitem__("app/evil.py", digest))
    verify_tree(bundle)  # passes without a key: what the issue found
    _trust(root, keys["release"][1])
    archive = _tar(bundle, TOP, tmp_path / "evil.tar.gz")
    done = run_install(signed["1.0.0"].output_dir / "install.sh", root, str(archive))
    assert done.returncode == 2 and "matches no trusted key" in done.stderr, done.stderr
    assert not (root / PREFIX).exists()
    with pytest.raises(InputError, match=r"matches no trusted key"):
        verify_tree(bundle, [keys["release"][1]])


def test_a_lower_version_is_refused_unless_forced(signed, keys, root):
    _trust(root, keys["release"][1])
    v1, v2 = signed["1.0.0"], signed["2.0.0"]
    assert run_install(v2.output_dir / "install.sh", root, str(v2.archive)).returncode == 0
    newer = current_release(root)
    before = state(root)
    done = run_install(v1.output_dir / "install.sh", root, str(v1.archive))
    assert done.returncode == 2 and "downgrade refused" in done.stderr, done.stderr
    assert state(root) == before
    forced = run_install(v1.output_dir / "install.sh", root, "--allow-downgrade", str(v1.archive))
    assert forced.returncode == 0, forced.stderr
    assert current_release(root).startswith("releases/small-1.0.0-")
    assert os.readlink(root / PREFIX / "previous") == newer


def test_a_lower_build_number_is_refused(small_build, keys, root, tmp_path):
    late = build_version(small_build, tmp_path / "late", "1.0.0", build_number=20)
    early = build_version(small_build, tmp_path / "early", "1.0.0", build_number=10)
    assert run_install(late.output_dir / "install.sh", root, str(late.archive)).returncode == 0
    done = run_install(early.output_dir / "install.sh", root, str(early.archive))
    assert done.returncode == 2 and "build 10) is older" in done.stderr, done.stderr


def test_the_installed_installer_checks_and_hands_over_an_upgrade(signed, keys, root):
    _trust(root, keys["release"][1])
    v1, v2 = signed["1.0.0"], signed["2.0.0"]
    assert run_install(v1.output_dir / "install.sh", root, str(v1.archive)).returncode == 0
    installed = root / PREFIX / "current/install.sh"
    done = run_install(installed, root, str(v2.archive))
    assert done.returncode == 0, done.stderr
    assert "small-2.0.0 is checked; its own install.sh installs it" in done.stderr
    assert current_release(root).startswith("releases/small-2.0.0-")


def test_the_installed_installer_refuses_what_a_new_installer_would_wave_through(
        signed, keys, root, tmp_path):
    """A bundle whose own install.sh checks nothing is still checked by the one on the device."""
    _trust(root, keys["release"][1])
    v1, v2 = signed["1.0.0"], signed["2.0.0"]
    assert run_install(v1.output_dir / "install.sh", root, str(v1.archive)).returncode == 0
    bundle = tmp_path / "small-2.0.0"
    shutil.copytree(v2.bundle_dir, bundle)
    (bundle / "MANIFEST.sig").write_bytes(b"\0" * 64)
    lax = (bundle / "install.sh").read_text().replace('check_signature "$dir"\n', "")
    (bundle / "install.sh").write_text(lax)
    digest = hashlib.sha256(lax.encode()).hexdigest()
    rewrite_manifest(bundle, lambda data: data["files"].__setitem__("install.sh", digest))
    done = run_install(bundle / "install.sh", root, str(bundle))
    assert done.returncode == 2 and "the installer on this device refuses" in done.stderr
    assert current_release(root).startswith("releases/small-1.0.0-")


# ---- 4. --root never builds a host environment into a rootfs ------------------------------------


def test_root_without_offline_never_runs_the_hosts_python(small_build, root, tmp_path):
    marker = tmp_path / "python-ran"
    env = shim(tmp_path / "bin", "python3", f"touch {marker}; exec /usr/bin/false\n")
    done = run_install(small_build.install_sh, root, str(small_build.archive), env=env,
                       python=True)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert not list(root.rglob(".venv"))
    assert "--finish" in done.stderr


# ---- 5. atomic upgrades --------------------------------------------------------------------------


def test_killed_between_the_link_switches_a_retry_and_rollback_still_work(small_build, root,
                                                                          tmp_path):
    v2 = build_version(small_build, tmp_path / "v2", "2.0.0")
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    first = current_release(root)
    count = tmp_path / "renames"
    env = shim(tmp_path / "bin", "mv", f"""for last; do :; done
case "$last" in */current|*/previous)
  n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}
  if [ $n -eq 2 ]; then kill -9 $PPID; exit 1; fi ;;
esac
exec {shutil.which("mv")} "$@"
""")
    killed = run_install(v2.output_dir / "install.sh", root, str(v2.archive), env=env)
    assert killed.returncode != 0
    assert (root / PREFIX / current_release(root) / "MANIFEST.json").is_file()
    retry = run_install(v2.output_dir / "install.sh", root, str(v2.archive))
    assert retry.returncode == 0, retry.stderr
    back = run_install(v2.output_dir / "install.sh", root, "--rollback")
    assert back.returncode == 0, back.stderr
    assert current_release(root) == first


def test_the_release_is_flushed_before_current_switches_to_it(small_build, root, tmp_path):
    v2 = build_version(small_build, tmp_path / "v2", "2.0.0")
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    first = current_release(root)
    log = tmp_path / "syncs"
    prefix = root / PREFIX
    env = shim(tmp_path / "bin", "sync", f"""echo "$(readlink {prefix}/current) \
$(ls -A {prefix}/releases | tr '\\n' ' ')" >> {log}
exec {shutil.which("sync")} "$@"
""")
    done = run_install(v2.output_dir / "install.sh", root, str(v2.archive), env=env)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    staged = [c for c in calls if c.startswith(first + " ") and ".small-2.0.0-" in c]
    placed = [c for c in calls if c.startswith(first + " ") and " small-2.0.0-" in c]
    assert staged and placed, calls  # the files before their rename, the folder before the switch
    assert calls[-1].startswith("releases/small-2.0.0-")  # and the switched links


# ---- health check and automatic rollback ---------------------------------------------------------

HEALTH = '! grep -q EDGEFUSE_BROKEN "$EDGEFUSE_CURRENT/env/edgefuse-small.env"'


def test_an_unhealthy_release_is_rolled_back_and_removed(small_build, root, tmp_path):
    bad = build_version(small_build, tmp_path / "bad", "2.0.0", health_marker=True)
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    first = current_release(root)
    unit = (root / "etc/systemd/system/edgefuse-small.service").read_text()
    done = run_install(bad.output_dir / "install.sh", root, "--health-cmd", HEALTH,
                       "--health-timeout", "0", str(bad.archive))
    assert done.returncode == 1, done.stderr
    assert "failed its health check" in done.stderr and f"rolled back to {first}" in done.stderr
    assert current_release(root) == first
    assert not (root / PREFIX / "previous").exists()
    assert [p.name for p in (root / PREFIX / "releases").iterdir()] == [first.split("/")[1]]
    assert (root / "etc/systemd/system/edgefuse-small.service").read_text() == unit


def test_a_healthy_release_keeps_the_previous_one(small_build, root, tmp_path):
    v2 = build_version(small_build, tmp_path / "v2", "2.0.0")
    assert run_install(small_build.install_sh, root, str(small_build.archive)).returncode == 0
    first = current_release(root)
    done = run_install(v2.output_dir / "install.sh", root, "--health-cmd", HEALTH,
                       "--health-timeout", "0", str(v2.archive))
    assert done.returncode == 0, done.stderr
    assert os.readlink(root / PREFIX / "previous") == first


# ---- 6. the install prefix stays inside the root -------------------------------------------------


def test_a_prefix_with_dot_dot_is_refused_by_the_spec(tmp_path):
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text() + "install:\n  prefix: /opt/../../escape\n")
    with pytest.raises(SpecError, match=r"install\.prefix"):
        load_spec(spec)


def test_install_sh_refuses_a_prefix_with_dot_dot(small_build, tmp_path, root):
    script = tmp_path / "install.sh"
    text = small_build.install_sh.read_text()
    script.write_text(text.replace("PREFIX=/opt/edgefuse/small", "PREFIX=/opt/../../escape", 1))
    before = state(tmp_path)
    done = run_install(script, root, str(small_build.archive))
    assert done.returncode == 2 and "has '.', '..'" in done.stderr, done.stderr
    assert state(tmp_path) == before


# ---- 11. and 12. ---------------------------------------------------------------------------------


def test_a_name_with_a_trailing_newline_is_refused_by_the_spec(tmp_path):
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace("service:\n", 'service:\n  name: "edgefuse-nl\\n"\n'))
    with pytest.raises(SpecError, match=r"service\.name"):
        load_spec(spec)


def test_the_archive_checked_is_the_archive_installed(small_build, root, tmp_path):
    """Swapping the file between the digest check and the extraction installs nothing else."""
    v2 = build_version(small_build, tmp_path / "v2", "2.0.0")
    archive = tmp_path / "published.tar.gz"
    shutil.copy(small_build.archive, archive)
    env = shim(tmp_path / "bin", "sha256sum", f"""out=$({shutil.which("sha256sum")} "$@")
cp {v2.archive} {archive}
printf '%s\\n' "$out"
""")
    done = run_install(v2.output_dir / "install.sh", root, "--expect-sha256",
                       small_build.outcome.archive_sha256, str(archive), env=env)
    assert done.returncode == 0, done.stderr
    assert current_release(root).startswith("releases/small-1.0.0-")



# ---- the card maker's hook installs the trust store ---------------------------------------------


def _rootfs(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    for folder in ("etc/systemd/system", "var", "opt"):
        (rootfs / folder).mkdir(parents=True)
    return rootfs


def test_the_minirc_hook_installs_the_trusted_keys_and_checks_with_them(signed, keys, tmp_path):
    rootfs = _rootfs(tmp_path)
    hook = signed["1.0.0"].bundle_dir / "minirc_install_hook.sh"
    env = {**os.environ, "EDGEFUSE_TRUSTED_KEYS": str(keys["release"][1])}
    done = subprocess.run(["bash", str(hook), str(rootfs)], capture_output=True, text=True,
                          check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert (rootfs / f"etc/edgefuse/keys/{key_fingerprint(keys['release'][1])}.pem"
            ).read_bytes() == keys["release"][1].read_bytes()
    assert (rootfs / PREFIX / "current/MANIFEST.sig").is_file()


def test_the_minirc_hook_refuses_a_bundle_its_keys_did_not_sign(small_build, keys, tmp_path):
    rootfs = _rootfs(tmp_path)
    before = state(rootfs)
    env = {**os.environ, "EDGEFUSE_TRUSTED_KEYS": str(keys["release"][1])}
    done = subprocess.run(["bash", str(small_build.bundle / "minirc_install_hook.sh"),
                           str(rootfs)], capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 2 and "is not signed" in done.stderr, done.stderr
    assert state(rootfs) == before


# ---- 8. no decompression bomb reaches TMPDIR ----------------------------------------------------


def test_an_archive_that_unpacks_far_beyond_its_size_is_refused_before_extraction(small_build,
                                                                                  tmp_path, root):
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as out:
        folder = tarfile.TarInfo(TOP)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        out.addfile(folder)
        info = tarfile.TarInfo(f"{TOP}/models/zeros.bin")
        info.size, info.mode = 96 << 20, 0o644
        out.addfile(info, io.BytesIO(bytes(info.size)))
    assert archive.stat().st_size < 1 << 20  # 96 MiB in well under 1 MiB
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = run_install(small_build.install_sh, root, str(archive), env={"TMPDIR": str(scratch)})
    assert done.returncode == 2 and "decompression bomb" in done.stderr, done.stderr
    assert not (root / PREFIX).exists()
    assert sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file()) < 2 << 20
    with pytest.raises(InputError, match=r"decompression bomb"):
        verify_bundle(archive, run_models=False)


@pytest.mark.parametrize(("filler", "total", "limit"), [
    (25_000_000, 3 << 30, None),  # over 2 GiB, over 100x + 64 MiB: the ratio refuses it
    (90_000_000, (8 << 30) + (1 << 20), 8 << 30),  # within 100x + 64 MiB, over the 8 GiB cap
], ids=["over-2-gib", "over-8-gib"])
def test_a_large_archive_may_not_unpack_beyond_its_limit(small_build, tmp_path, root, filler,
                                                          total, limit):
    """A ``filler``-byte archive (a stored member) whose listing adds a sparse member up to
    ``total`` bytes: refused before anything reaches TMPDIR, naming the limit. Past 85 MB an
    archive's 100x allowance exceeds 8 GiB, and the cap must still hold; and a total past
    2^31 must be summed as the number it is (mawk's printf %d stops at 2147483647, which let
    any archive of 21 MB or more through). GNU tar lists a sparse member at its full size, as
    it would unpack it."""
    folder = tmp_path / "crafted" / TOP
    (folder / "models").mkdir(parents=True)
    with open(folder / "models" / "filler.bin", "wb") as out:
        out.write(bytes(filler))
    with open(folder / "models" / "hole.bin", "wb") as out:
        out.truncate(total - filler)
    plain = tmp_path / "crafted.tar"
    subprocess.run(["tar", "-S", "-C", str(folder.parent), "-cf", str(plain), TOP], check=True)
    archive = tmp_path / "crafted.tar.gz"
    with open(plain, "rb") as source, gzip.open(archive, "wb", compresslevel=0) as out:
        shutil.copyfileobj(source, out, 1 << 20)  # stored: the archive keeps its 90 MB
    plain.unlink()
    shutil.rmtree(folder.parent)
    size = archive.stat().st_size
    if limit is None:
        limit = 100 * size + (64 << 20)
    else:
        assert 100 * size + (64 << 20) > total  # the ratio alone would let it in
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = run_install(small_build.install_sh, root, str(archive), env={"TMPDIR": str(scratch)})
    assert done.returncode == 2, done.stderr
    assert f"unpack to {total} bytes, more than {limit} for a {size}-byte archive" \
        in done.stderr, done.stderr
    assert not (root / PREFIX).exists()
    assert sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file()) < 2 << 20


# ---- 10. the service never runs as root ----------------------------------------------------------


def test_a_root_service_user_is_refused_by_the_spec(tmp_path):
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace("service:\n", "service:\n  user: root\n"))
    with pytest.raises(SpecError, match=r"service\.user"):
        load_spec(spec)


def _installer_functions(script: Path, *names: str) -> str:
    """install.sh's service settings, note() and the named functions, cut out of the rendered
    script, to run alone with shims: what they do on a board would change this machine."""
    text = script.read_text()
    settings = [line for line in text.splitlines()
                if re.match(r"(SERVICE|SERVICE_USER|SERVICE_GROUP)=", line)]
    cut = [text[text.index(f"{name}() {{"):text.index("\n}\n", text.index(f"{name}() {{")) + 3]
           for name in names]
    return "\n".join([*settings, 'note() { echo "install.sh: $*" >&2; }', *cut])


def _recorded(tmp_path: Path, program: str, **results: str) -> list[str]:
    """``program`` run with a recording shim for each command of ``results`` (name: the shim's
    last line, e.g. ``exit 1``); returns the calls in order."""
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    env = {}
    for name, result in results.items():
        env = shim(tmp_path / "bin", name, f'printf "%s\\n" "{name} $*" >> {log}\n{result}\n')
    subprocess.run(["bash", "-c", program], env={**os.environ, **env}, check=True)
    return log.read_text().splitlines() if log.exists() else []


def test_the_service_user_is_made_on_the_board_and_never_in_a_root(small_build, tmp_path):
    """ensure_user as an install or --finish without --root runs it on a board with no
    HwHiAiUser: the system group, then the system user with no home and no shell; nothing
    where the user exists, and nothing at all with --root (the image's own users are the
    card maker's). Run with shims: for real it would add the user to this machine."""
    program = _installer_functions(small_build.install_sh, "ensure_user")
    commands = {"id": "exit 1", "getent": "exit 2", "groupadd": "exit 0", "useradd": "exit 0"}
    assert _recorded(tmp_path, program + "\nROOT=\nensure_user\n", **commands) == [
        "id -u HwHiAiUser", "getent group HwHiAiUser", "groupadd --system HwHiAiUser",
        "useradd --system --gid HwHiAiUser --home-dir /nonexistent --shell /usr/sbin/nologin "
        "HwHiAiUser"]
    assert _recorded(tmp_path, program + "\nROOT=\nensure_user\n",
                     **{**commands, "id": "echo 999"}) == ["id -u HwHiAiUser"]
    assert _recorded(tmp_path, program + f"\nROOT={tmp_path}\nensure_user\n", **commands) == []


def test_the_service_is_started_through_systemd_only_on_a_live_board(small_build, tmp_path):
    program = _installer_functions(small_build.install_sh, "start_service")
    assert _recorded(tmp_path, program + "\nLIVE=1\nstart_service\n", systemctl="exit 0") == [
        "systemctl daemon-reload", "systemctl enable edgefuse-small.service",
        "systemctl restart --no-block edgefuse-small.service"]
    assert _recorded(tmp_path, program + "\nLIVE=0\nstart_service\n", systemctl="exit 0") == []


# ---- the CLI: keys new, build --sign, bundle verify --key ----------------------------------------


def test_keys_new_then_build_sign_then_verify_key_from_the_cli(small_build, tmp_path, capsys):
    assert main(["keys", "new", "ci", "-o", str(tmp_path)]) == 0
    private, public = tmp_path / "ci.key.pem", tmp_path / "ci.pub.pem"
    assert private.stat().st_mode & 0o777 == 0o600
    assert main(["keys", "new", "ci", "-o", str(tmp_path)]) == 2  # never overwritten
    spec = write_spec(tmp_path / "spec")
    out = tmp_path / "out"
    assert main(["build", str(spec), "-o", str(out), "--cache", str(small_build.cache),
                 "--no-progress", "--sign", str(private), "--build-number", "7"]) == 0
    manifest = json.loads((out / TOP / "MANIFEST.json").read_text())
    assert manifest["bundle"]["build"] == 7
    capsys.readouterr()
    assert main(["bundle", "verify", str(out / f"{TOP}.tar.gz"), "--no-run", "--key",
                 str(public)]) == 0
    assert main(["build", str(spec), "-o", str(tmp_path / "out2"), "--sign", str(public)]) == 2
    assert "error[bad-signing-key]" in capsys.readouterr().err


def test_the_unit_is_hardened_as_systemd_analyze_security_rates_it(small_build, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = small_build.bundle / "systemd/edgefuse-small.service"
    rated = subprocess.run([analyze, "security", "--offline=true", str(unit)],
                           capture_output=True, text=True, check=False)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", rated.stdout)
    if level is None:
        pytest.skip(f"this systemd-analyze cannot rate a unit file offline: {rated.stderr}")
    assert float(level.group(1)) <= 3.0, rated.stdout[-3000:]  # 9.2 UNSAFE before


# ---- 13. the card maker never gets a disk in use -------------------------------------------------

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-image.sh"


def test_build_image_refuses_a_mounted_device_before_building(tmp_path):
    devices = sorted(p for p in Path("/dev").iterdir() if p.is_block_device())
    if not devices:
        pytest.skip("no block device here to name")
    maker = tmp_path / "maker"
    maker.mkdir()
    (maker / "make_sd_card.py").write_text("raise SystemExit('must not run')\n")
    marker = tmp_path / "built"
    env = shim(tmp_path / "bin", "lsblk", 'echo ""; echo /\n')
    env.update(shim(tmp_path / "bin", "edgefuse", f"touch {marker}\n"))
    done = subprocess.run(["bash", str(SCRIPT), "spec.yaml", "--card-maker", str(maker),
                           "--device", str(devices[0])], capture_output=True, text=True,
                          check=False, env={**os.environ, **env})
    assert done.returncode == 2 and "is in use (mounted at: /" in done.stderr, done.stderr
    assert not marker.exists()
