"""The aarch64 rehearsal for real (issue 26 §4): a tiny bundle, built against the real package
index for the debian-12-arm64 board (Python 3.11, glibc 2.36), installed, run, upgraded, broken
and rolled back in the cached Debian 12 arm64 root under qemu-user >= 10, with `edgefuse bundle
rehearse`. The spec names boards of edgefuse.bundle.boards (from the wheels work, issue 26 §1-2).

Needs root, binfmt_misc, debootstrap, qemu-user >= 10 and the package index (.ci/run installs
them: .ci/qemu-user.sh). It skips only where binfmt_misc cannot be mounted or registered (not
root, a container without it): there no aarch64 program can run. The root is cached in
~/.cache/edgefuse/rehearsal between runs (made once by debootstrap: minutes, docs/fleet.md), the
wheels in the build cache; the rehearsal itself takes minutes under emulation, so it runs once
and the tests read its report.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from edgefuse.bundle.builder import default_cache_dir
from edgefuse.bundle.rehearsal import rehearse
from edgefuse.bundle.rehearsal_qemu import find_qemu, mount_binfmt_misc, register
from edgefuse.bundle.rehearsal_root import RootRecipe, cached_root, debian_mirror
from edgefuse.bundle.rehearsal_service import HEALTH_FRAMES
from edgefuse.bundle.service import VERIFIER_PATH
from edgefuse.bundle.signing import key_fingerprint
from edgefuse.cli.main import main
from edgefuse.errors import InputError

pytestmark = [pytest.mark.torch, pytest.mark.slow]

# The tiny catalogue detector (random weights) in a detection app, for a board of the board
# table (edgefuse.bundle.boards): debian-12-arm64, the rehearsal root's system (Python 3.11,
# glibc 2.36), or the Atlas 200I DK A2 (Python 3.10), which that root must refuse.
SPEC = """\
apiVersion: edgefuse/v1
bundle:
  name: rehearsed
  version: 1.0.0
target:
  board: {board}
  soc: Ascend310B4
reproducibility:
  source_date_epoch: 1767225600
models:
  - name: detector
    source: yolov8n:tiny
    precision: {{keep_fp32: none}}
app:
  kind: detection
  model: detector
  source: 0
  sinks: {{jsonl: /var/lib/edgefuse/rehearsed/detections.jsonl}}
  backend: [acl, cpu]
service:
  user: HwHiAiUser
  environment: {{EDGEFUSE_LOG: info}}
python:
  wheels: download
"""


@pytest.fixture(scope="module")
def binfmt():
    """qemu-user >= 10 registered with binfmt_misc, or a skip that says why it cannot be."""
    if os.geteuid() != 0:
        pytest.skip("not root: binfmt_misc cannot be registered, so no aarch64 program runs here")
    try:
        mount_binfmt_misc()
    except InputError as error:
        pytest.skip(f"binfmt_misc cannot be mounted here: {error.message}")
    register(find_qemu())


@pytest.fixture(scope="module")
def arm64_root(binfmt) -> Path:
    """The cached Debian 12 arm64 root (made by debootstrap on a cold cache)."""
    return cached_root(RootRecipe(), debian_mirror()).rootfs


def _spec(folder: Path, board: str) -> Path:
    folder.mkdir(parents=True)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(board=board), encoding="utf-8")
    return spec


@pytest.fixture(scope="module")
def rehearsal(arm64_root, tmp_path_factory):
    """One rehearsal through the command line: (exit code, OUT_DIR, its JSON report)."""
    folder = tmp_path_factory.mktemp("rehearsal")
    spec = _spec(folder / "spec", "debian-12-arm64")
    out = folder / "out"
    code = main(["bundle", "rehearse", str(spec), "-o", str(out),
                 "--cache", str(default_cache_dir())])
    return code, out, json.loads((out / "rehearsal.json").read_text(encoding="utf-8"))


def _steps(report) -> dict[str, dict]:
    return {step["name"]: step for step in report["steps"]}


def test_every_step_passes_in_order(rehearsal):
    code, _, report = rehearsal
    assert code == 0 and report["passed"], json.dumps(report, indent=2)
    assert [step["name"] for step in report["steps"]] == [
        "qemu", "root", "root copy", "python", "build", "trust", "install 1.0.0",
        "service 1.0.0", "upgrade 1.0.1", "service 1.0.1", "broken 1.0.2",
        "service 1.0.1 again", "rollback", "service 1.0.0 again"]


def test_the_first_install_runs_through_the_verifier_as_on_a_board(rehearsal):
    """As a board's first install: the card hook's verifier checks install.sh.sig against the
    publisher's key, trusted under its fingerprint, before the installer runs."""
    _, out, report = rehearsal
    trusted = f"/etc/edgefuse/keys/{key_fingerprint(out / 'keys' / 'rehearsal.pub.pem')}.pem"
    assert trusted in _steps(report)["trust"]["result"]
    installer_log = (out / "logs" / "install-1.0.0.log").read_text(encoding="utf-8")
    assert installer_log.startswith(f"$ {VERIFIER_PATH} /var/tmp/edgefuse-rehearsal/install.sh ")
    assert f"install.sh is signed by {trusted}" in installer_log


def test_frames_flow_through_the_cpu_fallback_as_the_service_user(rehearsal):
    _, _, report = rehearsal
    for name, step in _steps(report).items():
        if name.startswith("service"):
            assert step["figures"]["backend"] == "cpu", step
            assert step["figures"]["frames"] >= HEALTH_FRAMES and step["figures"]["fps"] > 0
            assert step["result"].startswith("as HwHiAiUser:"), step


def test_the_broken_release_is_rolled_back_by_the_installers_health_check(rehearsal):
    _, out, report = rehearsal
    step = _steps(report)["broken 1.0.2"]
    assert step["passed"] and "rolled back" in step["result"] and "-1.0.1-" in step["result"]
    installer_log = (out / "logs" / "broken-1.0.2.log").read_text(encoding="utf-8")
    assert "failed its health check" in installer_log and "rolled back to" in installer_log
    # install.sh quotes the check's last 3 lines: the app's reason (the model's digest)
    assert "the file changed after `edgefuse compile`" in installer_log


def test_the_manual_rollback_returns_to_the_first_release(rehearsal):
    _, _, report = rehearsal
    assert "-1.0.0-" in _steps(report)["rollback"]["result"]


def test_the_cached_root_is_never_written(rehearsal, arm64_root):
    assert not (arm64_root / "opt" / "edgefuse").exists()
    assert not (arm64_root / "etc" / "edgefuse").exists()
    assert not (arm64_root / VERIFIER_PATH.lstrip("/")).exists()
    assert not (arm64_root / "etc" / "systemd" / "system" / "edgefuse-rehearsed.service").exists()
    mounted = subprocess.run(["findmnt", "-R", "-n", str(arm64_root)], capture_output=True,
                             text=True, check=False).stdout
    assert mounted == ""


def test_a_root_with_another_python_is_refused_before_anything_is_built(arm64_root, tmp_path):
    spec = _spec(tmp_path / "spec", "atlas-200i-dk-a2")
    with pytest.raises(InputError, match=r"the root's python3 is 3\.11, but rehearsed-1\.0\.0's "
                                         r"wheels are for Python 3\.10") as caught:
        rehearse(spec, tmp_path / "out", rootfs=arm64_root)
    assert caught.value.reference == "wrong-board-python"
    assert not (tmp_path / "out" / "builds").exists()
