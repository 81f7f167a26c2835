"""`bundle verify` on a bundle it cannot read: a clear error (exit 2), never a traceback.

The bundle here is made by hand (conftest's ``hand_bundle``: a real MANIFEST.json with its
self-digest) so that one defect at a time can be put in. Permission cases run the CLI in a child
process without the capabilities that let root ignore file modes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from edgefuse.bundle.archive import MANIFEST
from edgefuse.cli.main import main
from tests.needs import without_dac_override

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _verify(target: Path, capsys) -> tuple[int, str]:
    code = main(["bundle", "verify", str(target), "--no-run"])
    return code, capsys.readouterr().err


def test_a_hand_made_bundle_passes(hand_bundle, capsys):
    assert main(["bundle", "verify", str(hand_bundle), "--no-run"]) == 0
    assert "hand-1.0.0: 1 files match MANIFEST.json" in capsys.readouterr().out


@pytest.mark.parametrize(("content", "message"), [
    (bytes(range(256)), r"error\[bundle-file-modified\]: .*MANIFEST.json was modified or damaged: "
                        r"it is not JSON \(.*utf-8"),
    (b"[1, 2]\n", r"error\[bad-bundle\]: .*MANIFEST.json holds a JSON list, not an object"),
])
def test_a_damaged_manifest_is_a_user_error(hand_bundle, capsys, content, message):
    (hand_bundle / MANIFEST).write_bytes(content)
    code, err = _verify(hand_bundle, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert re.search(message, err), err


@pytest.mark.parametrize("locked", ["app/config.yaml", MANIFEST, "archive"])
def test_an_unreadable_bundle_file_is_a_user_error(hand_bundle, tmp_path, locked):
    target = hand_bundle
    if locked == "archive":
        target = tmp_path / "hand.tar.gz"
        with tarfile.open(target, "w:gz") as archive:
            archive.add(hand_bundle, hand_bundle.name)
        target.chmod(0o000)
    else:
        (hand_bundle / locked).chmod(0o000)
    done = subprocess.run([*without_dac_override(), sys.executable, "-m", "edgefuse", "bundle",
                           "verify", str(target), "--no-run"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "error[cannot-read]: cannot read '" in done.stderr, done.stderr
    assert "Permission denied" in done.stderr
