"""The Ansible rollout (deploy/ansible), run for real with ``ansible-playbook``: three local
hosts, each with its own root folder (``ansible_connection: local`` and the installer's
``--root``), rolled out one at a time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgefuse.bundle.service import TEMPLATES
from edgefuse.bundle.signing import key_fingerprint, new_key_pair, sign_installer
from tests.bundle.trust import PREFIX, build_version

pytestmark = pytest.mark.ort

PLAYBOOK = Path(__file__).resolve().parents[2] / "deploy" / "ansible" / "rollout.yml"
HOSTS = ("board1", "board2", "board3")
HEALTH = ("echo {{ inventory_hostname }} >> LOG; "
          '! grep -q EDGEFUSE_BROKEN "$EDGEFUSE_CURRENT/env/edgefuse-small.env"')


def _playbook() -> str:
    found = shutil.which("ansible-playbook") or str(Path(sys.executable).parent /
                                                    "ansible-playbook")
    if not os.access(found, os.X_OK):
        pytest.skip("ansible-core is not installed (pip install -e '.[dev]')")
    return found


@pytest.fixture
def fleet(tmp_path):
    """An inventory of three local hosts, each installing into its own root."""
    log = tmp_path / "health.log"
    hosts = {}
    for name in HOSTS:
        root = tmp_path / name
        (root / "etc/systemd/system").mkdir(parents=True)
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter":
                       sys.executable, "edgefuse_root": str(root)}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"edgefuse_boards": {"hosts": hosts, "vars": {
        "edgefuse_bundle_name": "small", "edgefuse_health_timeout": 0,
        "edgefuse_health_passes": 1,  # one check per host (the log below); the default is 3
        "edgefuse_health_cmd": HEALTH.replace("LOG", str(log))}}}))
    return tmp_path, inventory, log


def _roll_out(tmp_path: Path, inventory: Path, outcome, *extra: str):
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible/tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOST_KEY_CHECKING": "0", "ANSIBLE_RETRY_FILES_ENABLED": "0"}
    return subprocess.run(
        [_playbook(), "-i", str(inventory), str(PLAYBOOK),
         "-e", f"edgefuse_bundle_archive={outcome.archive}",
         "-e", f"edgefuse_bundle_installer={outcome.output_dir / 'install.sh'}", *extra],
        capture_output=True, text=True, timeout=600, check=False, env=env)


def _recap(stdout: str) -> dict[str, dict[str, int]]:
    return {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
            for m in re.finditer(r"^(board\d)\s+:\s+(.*)$", stdout, re.MULTILINE)}


def _release(tmp_path: Path, host: str) -> str:
    return os.readlink(tmp_path / host / PREFIX / "current")


@pytest.mark.slow
def test_a_rolling_rollout_in_batches_is_idempotent_and_stops_at_a_bad_bundle(small_build,
                                                                              fleet):
    tmp_path, inventory, log = fleet
    key = tmp_path / "keys"
    key.mkdir()
    private, public = new_key_pair(key, "release")
    good = build_version(small_build, tmp_path / "v1", "1.0.0", key=private)
    bad = build_version(small_build, tmp_path / "v2", "2.0.0", key=private, health_marker=True)
    keys = ["-e", json.dumps({"edgefuse_trusted_keys": [str(public)]})]

    done = _roll_out(tmp_path, inventory, good, *keys)
    assert done.returncode == 0, done.stdout[-3000:]
    assert log.read_text().split() == list(HOSTS)  # one host per batch, in inventory order
    for host in HOSTS:
        assert _release(tmp_path, host).startswith("releases/small-1.0.0-")
        assert (tmp_path / host / f"etc/edgefuse/keys/{key_fingerprint(public)}.pem").is_file()
        assert (tmp_path / host / "usr/local/sbin/edgefuse-verify-installer").is_file()

    again = _roll_out(tmp_path, inventory, good, *keys)
    assert again.returncode == 0, again.stdout[-3000:]
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in _recap(again.stdout).values())
    assert set(_recap(again.stdout)) == set(HOSTS)

    log.unlink()
    broken = _roll_out(tmp_path, inventory, bad, *keys)
    assert broken.returncode != 0
    assert log.read_text().split() == ["board1"]  # the first batch failed: nothing further
    assert "rolled back to releases/small-1.0.0-" in broken.stdout
    for host in HOSTS:  # every host on a working release
        assert _release(tmp_path, host).startswith("releases/small-1.0.0-")
    assert not (tmp_path / "board2" / "var/lib/edgefuse/incoming" /
                bad.archive.name).exists()


@pytest.mark.slow
def test_an_unsigned_bundle_is_refused_by_the_playbook_before_anything_is_written(
        small_build, fleet):
    tmp_path, inventory, log = fleet
    key = tmp_path / "keys"
    key.mkdir()
    _, public = new_key_pair(key, "release")
    keys = ["-e", json.dumps({"edgefuse_trusted_keys": [str(public)]})]
    done = _roll_out(tmp_path, inventory, small_build.outcome, *keys)
    assert done.returncode != 0
    assert "is not signed" in done.stdout
    assert not (tmp_path / "board1" / PREFIX).exists()
    assert not (tmp_path / "board2" / "etc/edgefuse").exists()


# ---- issue 27 §3, §4: what the role trusts ------------------------------------------------------


def test_the_roles_verifier_is_the_one_the_bundle_carries():
    """One verifier: the role's copy (files/) is the template the bundles carry."""
    role = PLAYBOOK.parent / "roles/edgefuse_bundle/files/edgefuse-verify-installer"
    assert role.read_bytes() == (TEMPLATES / "edgefuse-verify-installer").read_bytes()


@pytest.mark.slow
def test_a_rollout_that_trusts_no_key_is_refused_before_any_board_is_touched(small_build,
                                                                           fleet):
    """The attack: edgefuse_trusted_keys defaulted to [], and an unsigned (or anyone's) bundle
    reached every board with exit 0 and no warning in the play's output."""
    tmp_path, inventory, log = fleet
    done = _roll_out(tmp_path, inventory, small_build.outcome)
    assert done.returncode != 0
    assert "edgefuse_trusted_keys is empty" in done.stdout, done.stdout[-3000:]
    for host in HOSTS:
        assert not (tmp_path / host / PREFIX).exists()
        assert not (tmp_path / host / "var/lib/edgefuse").exists()
    assert not log.exists()


@pytest.mark.slow
def test_allow_unsigned_rolls_out_on_purpose_and_says_so(small_build, fleet):
    tmp_path, inventory, _ = fleet
    done = _roll_out(tmp_path, inventory, small_build.outcome, "-e",
                     "edgefuse_allow_unsigned=true", "-e", "edgefuse_hosts=board1")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "WARNING: edgefuse_allow_unsigned is set" in done.stdout
    assert _release(tmp_path, "board1").startswith("releases/small-1.0.0-")


@pytest.mark.slow
def test_an_edited_first_install_installer_and_an_attacker_signed_bundle_are_refused(
        small_build, fleet):
    """The attack (§3): the board trusts only the release key; the attacker signs a bundle with
    their own key and edits one line of the install.sh beside it (no signature check). The
    role ran that installer on a first install, which installed the attacker's bundle. Now the
    controller runs it only through the verifier, which refuses it: nothing reaches a board."""
    tmp_path, inventory, log = fleet
    keys = tmp_path / "keys"
    keys.mkdir()
    _, public = new_key_pair(keys, "release")
    attacker_private, _ = new_key_pair(keys, "attacker")
    forged = build_version(small_build, tmp_path / "forged", "6.6.6", key=attacker_private)
    installer = forged.output_dir / "install.sh"
    text = installer.read_text()
    assert 'check_signature "$dir"\n' in text
    installer.write_text(text.replace('check_signature "$dir"\n', "true\n", 1))
    trust = ["-e", json.dumps({"edgefuse_trusted_keys": [str(public)]})]
    done = _roll_out(tmp_path, inventory, forged, *trust)
    assert done.returncode != 0
    assert "matches no trusted key" in done.stdout and "nothing was run" in done.stdout
    for host in HOSTS:
        assert not (tmp_path / host / PREFIX).exists()
        assert not (tmp_path / host / "var/lib/edgefuse/incoming").exists()
    # re-signed by the attacker, the installer is still not the release key's
    sign_installer(installer, attacker_private)
    again = _roll_out(tmp_path, inventory, forged, *trust)
    assert again.returncode != 0 and "matches no trusted key" in again.stdout
    assert not (tmp_path / "board1" / PREFIX).exists()


@pytest.mark.slow
def test_keys_of_the_same_file_name_are_both_trusted_by_fingerprint(small_build, fleet):
    """The attack (§4): a key file of the same name from another folder replaced the trusted
    key on the boards. Keys are now added under their fingerprints: both stay."""
    tmp_path, inventory, _ = fleet
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    private, first = new_key_pair(tmp_path / "a", "release")
    _, second = new_key_pair(tmp_path / "b", "release")
    good = build_version(small_build, tmp_path / "v1", "1.0.0", key=private)
    done = _roll_out(tmp_path, inventory, good, "-e", "edgefuse_hosts=board1", "-e",
                     json.dumps({"edgefuse_trusted_keys": [str(first), str(second)]}))
    assert done.returncode == 0, done.stdout[-3000:]
    store = tmp_path / "board1/etc/edgefuse/keys"
    assert sorted(p.name for p in store.iterdir()) == sorted(
        f"{key_fingerprint(key)}.pem" for key in (first, second))
    assert (store / f"{key_fingerprint(first)}.pem").read_bytes() == first.read_bytes()
    assert _release(tmp_path, "board1").startswith("releases/small-1.0.0-")
