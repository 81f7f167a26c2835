"""The first install runs only a signed installer (issue 27 §3, §9).

The attack: a board that trusts only the release key has no installer of this bundle yet, so
it runs the install.sh that came beside the archive; one edited line there (no signature check)
installed an attacker-signed bundle. `build --sign` now signs install.sh (install.sh.sig), and
edgefuse-verify-installer, which the card maker's hook puts on the board with the keys, runs it
only when that signature checks against them. The image build does the same check before its
install.sh runs (the Containerfile's RUN, executed here with bash).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from edgefuse.bundle.kube import write_k8s
from edgefuse.bundle.service import TEMPLATES, VERIFIER, VERIFIER_PATH
from edgefuse.bundle.signing import key_fingerprint, new_key_pair, sign_installer
from tests.bundle.trust import PREFIX, build_version, state

pytestmark = pytest.mark.ort

VERIFY = TEMPLATES / VERIFIER


@pytest.fixture(scope="module")
def releases(small_build, keys, tmp_path_factory):
    """1.0.0 signed by the release key; 6.6.6 signed by the attacker's."""
    root = tmp_path_factory.mktemp("first")
    return {"good": build_version(small_build, root / "good", "1.0.0", key=keys["release"][0]),
            "forged": build_version(small_build, root / "forged", "6.6.6",
                                    key=keys["attacker"][0])}


@pytest.fixture
def board(tmp_path, keys) -> Path:
    """A root that trusts only the release key (named by fingerprint, as the hook and the role
    name it)."""
    root = tmp_path / "board"
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/edgefuse/keys").mkdir(parents=True)
    public = keys["release"][1]
    shutil.copy(public, root / "etc/edgefuse/keys" / f"{key_fingerprint(public)}.pem")
    return root


def _edited(outcome, folder: Path) -> Path:
    """The attacker's one-line edit of the install.sh beside the archive: no signature check."""
    folder.mkdir()
    installer = folder / "install.sh"
    text = (outcome.output_dir / "install.sh").read_text()
    assert 'check_signature "$dir"\n' in text
    installer.write_text(text.replace('check_signature "$dir"\n', "true\n", 1))
    shutil.copy(outcome.output_dir / "install.sh.sig", folder / "install.sh.sig")
    return installer


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **(env or {})})


def _verified(board: Path, installer: Path, archive: Path, *extra: str):
    return _run(["bash", str(VERIFY), "--keys", str(board / "etc/edgefuse/keys"),
                 str(installer), "--root", str(board), "--no-python", *extra, str(archive)])


def test_the_build_signs_the_installer_it_writes_beside_the_archive(releases, keys):
    out = releases["good"].output_dir
    done = _run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(keys["release"][1]),
                 "-rawin", "-in", str(out / "install.sh"), "-sigfile",
                 str(out / "install.sh.sig")])
    assert done.returncode == 0, done.stderr
    assert (out / "install.sh").read_bytes() == (releases["good"].bundle_dir /
                                                 "install.sh").read_bytes()
    assert (releases["good"].bundle_dir / VERIFIER).read_bytes() == VERIFY.read_bytes()


def test_the_edited_installer_installs_the_attackers_bundle_when_run_directly(releases, board,
                                                                              tmp_path):
    """The attack as it worked: the edited script, run as the docs said, installs."""
    installer = _edited(releases["forged"], tmp_path / "attack")
    done = _run(["bash", str(installer), "--root", str(board), "--no-python",
                 str(releases["forged"].archive)])
    assert done.returncode == 0, done.stderr
    assert os.readlink(board / PREFIX / "current").startswith("releases/small-6.6.6-")


def test_the_verifier_refuses_the_edited_installer_and_nothing_runs(releases, board, tmp_path):
    installer = _edited(releases["forged"], tmp_path / "attack")
    before = state(board)
    done = _verified(board, installer, releases["forged"].archive)
    assert done.returncode == 2
    assert "matches no trusted key" in done.stderr and "nothing was run" in done.stderr
    assert state(board) == before


def test_the_verifier_refuses_an_installer_signed_by_another_key(releases, board, keys,
                                                                 tmp_path):
    installer = _edited(releases["forged"], tmp_path / "attack")
    sign_installer(installer, keys["attacker"][0])
    before = state(board)
    done = _verified(board, installer, releases["forged"].archive)
    assert done.returncode == 2 and "matches no trusted key" in done.stderr
    assert state(board) == before


def test_the_verifier_refuses_an_unsigned_installer_and_a_board_with_no_key(releases, board,
                                                                            tmp_path):
    folder = tmp_path / "unsigned"
    folder.mkdir()
    shutil.copy(releases["good"].output_dir / "install.sh", folder / "install.sh")
    done = _verified(board, folder / "install.sh", releases["good"].archive)
    assert done.returncode == 2 and "is not signed" in done.stderr
    empty = tmp_path / "nokeys"
    empty.mkdir()
    done = _run(["bash", str(VERIFY), "--keys", str(empty),
                 str(releases["good"].output_dir / "install.sh"), "--verify-only",
                 str(releases["good"].archive)])
    assert done.returncode == 2 and "no trusted key" in done.stderr
    assert not (board / PREFIX).exists()


def test_the_verifier_runs_the_signed_installer_with_its_arguments(releases, board):
    good = releases["good"]
    done = _verified(board, good.output_dir / "install.sh", good.archive)
    assert done.returncode == 0, done.stderr
    assert "is signed by" in done.stderr
    assert os.readlink(board / PREFIX / "current").startswith("releases/small-1.0.0-")
    # and the installer it ran checks the archive against the same keys: a forged archive
    # with the genuine installer is refused by that installer
    done = _verified(board, good.output_dir / "install.sh", releases["forged"].archive)
    assert done.returncode == 2 and "matches no trusted key" in done.stderr
    assert os.readlink(board / PREFIX / "current").startswith("releases/small-1.0.0-")


def test_the_minirc_hook_puts_the_verifier_and_fingerprint_named_keys_on_the_card(
        releases, keys, tmp_path):
    rootfs = tmp_path / "rootfs"
    for folder in ("etc/systemd/system", "var", "opt"):
        (rootfs / folder).mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    _, same_name = new_key_pair(other, "release")  # a second key named release.pub.pem
    hook = releases["good"].bundle_dir / "minirc_install_hook.sh"
    done = _run(["bash", str(hook), str(rootfs)],
                env={"EDGEFUSE_TRUSTED_KEYS": f"{keys['release'][1]}:{same_name}"})
    assert done.returncode == 0, done.stderr
    assert (rootfs / VERIFIER_PATH.lstrip("/")).read_bytes() == VERIFY.read_bytes()
    assert sorted(p.name for p in (rootfs / "etc/edgefuse/keys").iterdir()) == sorted(
        f"{key_fingerprint(key)}.pem" for key in (keys["release"][1], same_name))



@pytest.mark.parametrize(("link", "target", "written"), [
    ("etc/edgefuse", "HOST", "keys/{fingerprint}.pem"),  # an absolute link to this machine's
    ("usr/local/sbin", "../../../host", "edgefuse-verify-installer"),  # climbing out of it
    ("var", "HOST", "minirc_hook.sh"),
])
def test_the_minirc_hook_never_writes_through_a_link_out_of_the_rootfs(releases, keys, tmp_path,
                                                                      link, target, written):
    """The attack: a rootfs whose /etc/edgefuse (or /usr/local/sbin, or /var) is a link to a
    folder of the card maker's machine; the hook's mkdir -p and install into $ROOTFS wrote the
    keys, the verifier or the first-boot script there. As chroot(ROOTFS), the board, resolves
    it, the link leads to a folder of the image, which is where they must go."""
    host = tmp_path / "host"  # stands for the machine's /etc, /usr/local/sbin or /var
    host.mkdir()
    (host / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    rootfs = tmp_path / "rootfs"
    for folder in ("etc/systemd/system", "opt", "usr/local"):
        (rootfs / folder).mkdir(parents=True)
    (rootfs / link).symlink_to(str(host) if target == "HOST" else target)
    before = state(host)
    done = _run(["bash", str(releases["good"].bundle_dir / "minirc_install_hook.sh"), str(rootfs)],
                env={"EDGEFUSE_TRUSTED_KEYS": str(keys["release"][1])})
    assert done.returncode == 0, done.stderr
    assert state(host) == before
    inside = rootfs / (str(host).lstrip("/") if target == "HOST" else "host")
    assert (inside / written.format(fingerprint=key_fingerprint(keys["release"][1]))).is_file()


# ---- §9: the Containerfile ----------------------------------------------------------------------


def _containerfile_steps(text: str) -> list[str]:
    """The Containerfile's instructions, continuation lines joined."""
    return [line for line in re.sub(r"\\\n\s*", "", text).splitlines()
            if line and not line.startswith("#")]


def _build_image(context: Path, trust: Path, image: Path) -> subprocess.CompletedProcess:
    """What podman does with the Containerfile's COPY and the RUN that installs: the COPYs into
    ``image`` (the new image's root), then that RUN's own shell text under bash, its absolute
    paths taken into ``image``. The RUN that creates the service user is not run here (it would
    change this machine's users); its text is checked by the kube tests."""
    steps = _containerfile_steps((context / "k8s/Containerfile").read_text())
    done = None
    for step in steps:
        word, _, rest = step.partition(" ")
        if word == "COPY" and rest.startswith("--from=trust "):
            pattern, dest = rest.removeprefix("--from=trust ").split()
            target = image / dest.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            for path in trust.glob(pattern):
                shutil.copy(path, target / path.name)
        elif word == "COPY":
            *sources, dest = rest.split()
            target = image / dest.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            for name in sources:
                shutil.copy(context / name, target / name)
        elif word == "RUN" and "install.sh.sig" in rest:
            script = rest.replace("/etc/edgefuse/", f"{image}/etc/edgefuse/").replace(
                "/tmp/edgefuse/", f"{image}/tmp/edgefuse/")
            done = _run(["bash", "-c", script])
    assert done is not None, steps
    return done


@pytest.fixture
def stand_in(tmp_path) -> Path:
    """An installer that only records that it ran (the real one would install on this host)."""
    path = tmp_path / "stand-in.sh"
    path.write_text(f'#!/bin/bash\necho "$@" > {tmp_path}/ran\n')
    return path


def _image_context(release, keys, tmp_path: Path) -> tuple[Path, Path]:
    """OUT_DIR of the signed release with k8s/ as --emit k8s writes it, and a trust context
    holding the release key."""
    context = tmp_path / "context"
    shutil.copytree(release.output_dir, context)
    write_k8s(context / "k8s", release.spec, release.archive.name, None)
    trust = tmp_path / "trust"
    trust.mkdir()
    shutil.copy(keys["release"][1], trust / "release.pub.pem")
    return context, trust


def test_the_image_build_refuses_an_edited_installer_before_it_runs(releases, keys, tmp_path):
    context, trust = _image_context(releases["good"], keys, tmp_path)
    installer = context / "install.sh"
    installer.write_text(f"touch {tmp_path}/pwned\n" + installer.read_text())
    done = _build_image(context, trust, tmp_path / "image")
    assert done.returncode == 1
    assert "install.sh is not signed by a key of the trust context" in done.stderr
    assert not (tmp_path / "pwned").exists()
    # the genuine installer with no key in the trust context: nothing runs either
    shutil.copy(releases["good"].output_dir / "install.sh", installer)
    (tmp_path / "empty").mkdir()
    done = _build_image(context, tmp_path / "empty", tmp_path / "image2")
    assert done.returncode == 1 and "not signed by a key" in done.stderr


def test_the_image_build_runs_a_signed_installer_on_the_archive(releases, keys, tmp_path,
                                                                stand_in):
    context, trust = _image_context(releases["good"], keys, tmp_path)
    shutil.copy(stand_in, context / "install.sh")
    sign_installer(context / "install.sh", keys["release"][0])
    done = _build_image(context, trust, tmp_path / "image")
    assert done.returncode == 0, done.stderr
    assert "install.sh is signed by" in done.stdout
    ran = (tmp_path / "ran").read_text().split()
    assert ran == [str(tmp_path / "image/tmp/edgefuse" / releases["good"].archive.name)]
    assert (tmp_path / "image/etc/edgefuse/keys/release.pub.pem").is_file()
