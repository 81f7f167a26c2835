"""Regression tests of issue 27's findings against the archive and bundle checks (§1, §10, §12,
§13, §14, §17): each performs the attack on install.sh (run for real into temporary roots or
install prefixes) and ``bundle verify``, and each failed before its fix.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from packaging.version import Version

from edgefuse.bundle.builder import build
from edgefuse.bundle.bundle_check import MAX_MEMBERS, built_listing, verify_bundle, verify_tree
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.spec_problems import SpecError
from edgefuse.errors import InputError
from tests.bundle.models import write_spec
from tests.bundle.trust import (
    PREFIX,
    TOP,
    build_version,
    current_release,
    rewrite_manifest,
    run_install,
    shim,
    state,
    with_member,
)

pytestmark = pytest.mark.ort



def _tar(folder: Path, top: str, path: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        archive.add(folder, arcname=top)
    return path


def _mawk(tmp_path: Path) -> dict[str, str]:
    """PATH with mawk as ``awk``: the awk of Debian 12 and Ubuntu 22.04, the board's."""
    mawk = shutil.which("mawk")
    if mawk is None:
        pytest.skip("mawk, the board's awk, is not installed here (apt-get install mawk)")
    folder = tmp_path / "mawk-bin"
    folder.mkdir()
    (folder / "awk").symlink_to(mawk)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


# ---- §1: the archive bomb, the member flood, the signature before extraction --------------------


@pytest.mark.parametrize("unpacked", [(1 << 31) + (256 << 20), (1 << 32) + (1 << 20)],
                         ids=["over-2^31", "over-2^32"])
def test_a_bomb_over_2_to_the_31_or_32_bytes_is_refused_under_mawk(small_build, tmp_path, root,
                                                                   unpacked):
    """22 MB of noise lifts the limit (100 x size + 64 MiB) to 2.27 GB, over mawk's 2^31 - 1,
    at which its printf "%d" stopped the old sum; a sparse member claims the rest."""
    folder = tmp_path / "bomb" / TOP
    folder.mkdir(parents=True)
    (folder / "noise.bin").write_bytes(random.Random(0).randbytes(22 << 20))
    with open(folder / "zeros.bin", "wb") as sparse:
        sparse.truncate(unpacked - (22 << 20))
    archive = tmp_path / "bomb.tar.gz"
    subprocess.run(["tar", "-czSf", str(archive), "-C", str(folder.parent), TOP], check=True)
    size = archive.stat().st_size
    assert 100 * size + (64 << 20) > (1 << 31) - 1 and unpacked > 100 * size + (64 << 20)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    before = state(root)
    done = run_install(small_build.install_sh, root, str(archive),
                       env={**_mawk(tmp_path), "TMPDIR": str(scratch)})
    assert done.returncode == 2 and "decompression bomb" in done.stderr, done.stderr
    assert f"unpack to {unpacked} bytes" in done.stderr, done.stderr
    assert state(root) == before and not list(scratch.iterdir())
    with pytest.raises(InputError, match=r"sparse|decompression bomb"):
        verify_bundle(archive, run_models=False)


def test_a_flood_of_members_is_refused_before_any_is_looked_at(small_build, tmp_path, root):
    archive = tmp_path / "flood.tar.gz"
    with tarfile.open(archive, "w:gz") as out:
        folder = tarfile.TarInfo(TOP)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        out.addfile(folder)
        for index in range(MAX_MEMBERS):
            out.addfile(tarfile.TarInfo(f"{TOP}/f{index}"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = run_install(small_build.install_sh, root, str(archive), env={"TMPDIR": str(scratch)})
    assert done.returncode == 2, done.stderr
    assert f"{MAX_MEMBERS + 1} members, more than {MAX_MEMBERS}" in done.stderr, done.stderr
    assert not (root / PREFIX).exists() and not list(scratch.iterdir())
    with pytest.raises(InputError, match=rf"more than {MAX_MEMBERS} members"):
        verify_bundle(archive, run_models=False)


def test_a_real_bundle_is_far_below_the_member_cap(small_build):
    with tarfile.open(small_build.archive) as archive:
        assert len(archive.getmembers()) < MAX_MEMBERS // 50


def test_nothing_but_the_manifest_leaves_a_forged_archive(small_build, keys, tmp_path, root):
    """The signature is checked before extraction: tar -x only ever names MANIFEST.json and
    MANIFEST.sig of an archive whose signature is forged."""
    forged = build_version(small_build, tmp_path / "forged", "1.0.0", key=keys["attacker"][0])
    (root / "etc/edgefuse/keys").mkdir(parents=True)
    shutil.copy(keys["release"][1], root / "etc/edgefuse/keys/release.pub.pem")
    log = tmp_path / "tar.log"
    env = shim(tmp_path / "bin", "tar", f'echo "$*" >> {log}\nexec {shutil.which("tar")} "$@"\n')
    done = run_install(forged.output_dir / "install.sh", root, str(forged.archive), env=env)
    assert done.returncode == 2 and "matches no trusted key" in done.stderr, done.stderr
    extractions = [line for line in log.read_text().splitlines() if line.startswith("-x")]
    assert extractions, log.read_text()
    for line in extractions:
        assert line.endswith(f"{TOP}/MANIFEST.json {TOP}/MANIFEST.sig"), line
    with pytest.raises(InputError, match=r"matches no trusted key"):
        verify_bundle(forged.archive, run_models=False, keys=[keys["release"][1]])


def test_a_member_twice_is_refused(small_build, tmp_path, root):
    """tar extracts the last of two members of one name: a checked first copy hides the second."""
    archive = with_member(small_build.archive, tmp_path / "twice.tar.gz", f"{TOP}/install.sh",
                          b"#!/bin/sh\necho evil\n")
    done = run_install(small_build.install_sh, root, str(archive))
    assert done.returncode == 2 and f"'{TOP}/install.sh' is in it twice" in done.stderr
    assert not (root / PREFIX).exists()
    with pytest.raises(InputError, match=r"install\.sh' is in it twice"):
        verify_bundle(archive, run_models=False)


# ---- §13 and §14: the archive's folder and the bundle's name are the signed ones ----------------


def test_an_archive_whose_folder_is_not_its_signed_id_is_refused(small_build, tmp_path, root):
    archive = _tar(small_build.bundle, "small-9.9.9", tmp_path / "small-9.9.9.tar.gz")
    done = run_install(small_build.install_sh, root, str(archive))
    assert done.returncode == 2 and "renamed or mixed up" in done.stderr, done.stderr
    assert not (root / PREFIX).exists()
    with pytest.raises(InputError, match=r"renamed or mixed up"):
        verify_bundle(archive, run_models=False)


def test_another_bundle_whose_name_starts_with_ours_is_refused(small_build, tmp_path, root):
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace("bundle:\n  name: small\n",
                                             "bundle:\n  name: small-extra\n"))
    extra = build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    for source in (extra.archive, extra.bundle_dir):
        done = run_install(small_build.install_sh, root, str(source))
        assert done.returncode == 2, done.stderr
        assert "not one of small" in done.stderr or "not a bundle of small" in done.stderr
    assert not (root / PREFIX).exists()


def test_verify_only_names_the_bundle_it_checked(small_build, root):
    done = run_install(small_build.install_sh, root, "--verify-only", str(small_build.archive))
    assert done.returncode == 0, done.stderr
    assert f"{TOP} (build 1767225600): every file matches" in done.stderr


# ---- §12: PEP 440 order, and one version never swapped for other content ------------------------


def _order_functions(script: Path) -> str:
    """install.sh's own version_order and its helpers, cut out of the rendered script."""
    text = script.read_text()
    return text[text.index("VERSION_RE="):text.index("check_not_older() {")]


def test_install_sh_orders_versions_as_pep_440_does(small_build):
    numbers = ["0", "1", "2", "10"]
    forms = ["", "a1", "b2", "rc1", "rc10", ".post1", ".dev3", "a1.dev1", "rc1.post2",
             ".post1.dev1"]
    versions = [f"{major}.{minor}{form}" for major, minor, form in
                itertools.product(numbers[:3], numbers, forms)] + ["1.0.0", "1", "1.0.0.0rc1"]
    pairs = random.Random(1).sample(list(itertools.product(versions, versions)), 600)
    script = _order_functions(small_build.install_sh) + "".join(
        f'version_order "{a}" "{b}"\n' for a, b in pairs)
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    expected = [str((Version(a) > Version(b)) - (Version(a) < Version(b))) for a, b in pairs]
    assert ran.stdout.split() == expected


@pytest.fixture(scope="module")
def same_build(small_build, tmp_path_factory):
    """Releases with the spec's pinned source date epoch as their build number, all alike."""
    root = tmp_path_factory.mktemp("same-build")
    made = {version: build_version(small_build, root / version, version)
            for version in ("2.0.0rc1", "2.0.0")}
    made["2.0.0-other"] = build_version(small_build, root / "other", "2.0.0", health_marker=True)
    return made


def test_a_final_release_replaces_its_release_candidate_and_not_back(same_build, root):
    rc1, final = same_build["2.0.0rc1"], same_build["2.0.0"]
    assert run_install(rc1.output_dir / "install.sh", root, str(rc1.archive)).returncode == 0
    done = run_install(final.output_dir / "install.sh", root, str(final.archive))
    assert done.returncode == 0, done.stderr
    assert current_release(root).startswith("releases/small-2.0.0-")
    before = state(root)
    back = run_install(rc1.output_dir / "install.sh", root, str(rc1.archive))
    assert back.returncode == 2, back.stderr
    assert "2.0.0rc1 is older than the installed 2.0.0 (PEP 440" in back.stderr
    assert state(root) == before


def test_the_same_version_and_build_with_other_content_is_refused_unless_forced(same_build,
                                                                                root):
    final, other = same_build["2.0.0"], same_build["2.0.0-other"]
    assert final.archive_sha256 != other.archive_sha256
    assert run_install(final.output_dir / "install.sh", root, str(final.archive)).returncode == 0
    before = state(root)
    done = run_install(other.output_dir / "install.sh", root, str(other.archive))
    assert done.returncode == 2 and "is installed already, with other content" in done.stderr
    assert state(root) == before
    again = run_install(final.output_dir / "install.sh", root, str(final.archive))
    assert again.returncode == 0, again.stderr  # the same content: a repair, not a swap
    forced = run_install(other.output_dir / "install.sh", root, "--allow-downgrade",
                         str(other.archive))
    assert forced.returncode == 0, forced.stderr
    assert "EDGEFUSE_BROKEN" in (root / PREFIX / "current/env/edgefuse-small.env").read_text()


@pytest.mark.parametrize("version", ["2.0.0-rc1", "v2.0", "02.0", "2.0+local", "1!2.0", "2.0RC1"])
def test_a_version_outside_pep_440_normal_form_is_refused_by_the_spec(tmp_path, version):
    spec = write_spec(tmp_path / "spec", version=version)
    with pytest.raises(SpecError, match=r"bundle\.version.*wrong form"):
        load_spec(spec)


# ---- §10: a .venv counts only in the release folder install.sh built it in ----------------------


def test_a_planted_venv_with_a_record_beside_it_is_refused_by_both(small_build, tmp_path, root):
    """DIR/../../venv-digests/NAME.sha256 is where a record would be for an installed release;
    anyone can put one there."""
    release = tmp_path / "elsewhere" / "releases" / TOP
    shutil.copytree(small_build.bundle, release)
    (release / ".venv/bin").mkdir(parents=True)
    (release / ".venv/bin/edgefuse").write_text("#!/bin/sh\necho planted\n")
    records = tmp_path / "elsewhere" / "venv-digests"
    records.mkdir()
    (records / f"{TOP}.sha256").write_text(built_listing(release, ".venv") + "\n")
    with pytest.raises(InputError, match=r"not the Python environment install\.sh built"):
        verify_tree(release)
    done = run_install(small_build.install_sh, root, str(release))
    assert done.returncode == 2 and ".venv/bin/edgefuse" in done.stderr, done.stderr
    assert not (root / PREFIX).exists()


# ---- §17: each release builds, records and rolls back with its own custom-op package ----------

OPP_BUILD = "#!/bin/bash\nset -e\necho built > custom_opp.run\n"
OPP_INSTALL = """#!/bin/bash
set -e
mkdir -p "$1/vendors/edgefuse/op_impl"
cp op.py "$1/vendors/edgefuse/op_impl/op.py"
"""


def _with_op_package(bundle: Path, folder: Path, op: str) -> Path:
    """The bundle with an opp/ project whose package holds ``op``, and an installer that builds
    it (OPP_VENDOR=edgefuse), as a bundle of a model with custom ops has."""
    target = folder / bundle.name
    shutil.copytree(bundle, target)
    (target / "opp").mkdir()
    for name, text in (("build.sh", OPP_BUILD), ("install.sh", OPP_INSTALL), ("op.py", op)):
        (target / "opp" / name).write_text(text)
    script = target / "install.sh"
    script.write_text(script.read_text().replace("OPP_VENDOR=''", "OPP_VENDOR=edgefuse", 1))
    rewrite_manifest(target, lambda data: data["files"].update({
        path.relative_to(target).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in [*(target / "opp").iterdir(), script]}))
    return target


def test_each_release_builds_and_rolls_back_with_its_own_custom_op_package(small_build,
                                                                           tmp_path):
    prefix = tmp_path / "board" / "opt" / "small"
    releases = {}
    for version in ("1.0.0", "2.0.0"):
        built = build_version(small_build, tmp_path / version, version, prefix=str(prefix))
        releases[version] = _with_op_package(built.bundle_dir, tmp_path / f"opp-{version}",
                                             f"OP = '{version}'\n")
    toolkit = {**shim(tmp_path / "bin", "cmake", "exit 0\n"),
               "ASCEND_HOME_PATH": str(tmp_path / "toolkit")}
    for version in ("1.0.0", "2.0.0"):
        bundle = releases[version]
        done = run_install(bundle / "install.sh", None, str(bundle), env=toolkit)
        assert done.returncode == 0, done.stderr
        live = (prefix / "current").resolve()
        op = live / ".opp/vendors/edgefuse/op_impl/op.py"
        assert op.read_text() == f"OP = '{version}'\n"  # not the first release's, reused
        assert (prefix / "opp-digests" / f"{live.name}.sha256").is_file()
        verify_tree(prefix / "current")
    previous = (prefix / "previous").resolve()
    (previous / ".opp/vendors/edgefuse/op_impl/op.py").write_text("OP = 'evil'\n")
    done = run_install(releases["2.0.0"] / "install.sh", None, "--rollback")
    assert done.returncode == 2 and "not the custom-op package" in done.stderr, done.stderr
    assert os.readlink(prefix / "current").startswith("releases/small-2.0.0-")
    with pytest.raises(InputError, match=r"not the custom-op package install\.sh built"):
        verify_tree(previous)
