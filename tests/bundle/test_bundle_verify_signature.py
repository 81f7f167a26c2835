"""`bundle verify` says whether it checked the signature (issue 27 §15).

The attack: a bundle re-signed with an attacker's key (or not signed at all) was reported as
"N files match MANIFEST.json" with exit 0 when no --key was given, as if it were the publisher's.
Now the report carries a signature line, and a signed bundle without a key is refused (exit 2,
``signature-not-checked``) unless --no-signature-check says so on purpose.
"""

from __future__ import annotations

import json

import pytest

from edgefuse.bundle.bundle_check import verify_bundle
from edgefuse.bundle.signing import sign_bundle
from edgefuse.cli.main import main
from edgefuse.errors import InputError

pytestmark = pytest.mark.unit


def test_an_attacker_signed_bundle_without_a_key_is_refused_not_reported_ok(hand_bundle, keys,
                                                                            capsys):
    sign_bundle(hand_bundle, keys["attacker"][0])
    code = main(["bundle", "verify", str(hand_bundle), "--no-run"])
    captured = capsys.readouterr()
    assert code == 2
    assert "error[signature-not-checked]" in captured.err
    assert "signature NOT checked" in captured.err and "--key" in captured.err
    assert "files match" not in captured.out
    with pytest.raises(InputError, match=r"signed, but no key was given: signature NOT checked"):
        verify_bundle(hand_bundle, run_models=False)


def test_no_signature_check_is_an_explicit_choice_and_the_report_says_so(hand_bundle, keys, capsys,
                                                                         tmp_path):
    sign_bundle(hand_bundle, keys["attacker"][0])
    report_file = tmp_path / "report.json"
    code = main(["bundle", "verify", str(hand_bundle), "--no-run", "--no-signature-check",
                 "--json", str(report_file)])
    out = capsys.readouterr().out
    assert code == 0
    assert "signature: NOT checked (--no-signature-check)" in out
    assert json.loads(report_file.read_text())["signature"].startswith("NOT checked")


def test_an_unsigned_bundle_is_reported_as_not_checked(hand_bundle, capsys):
    assert main(["bundle", "verify", str(hand_bundle), "--no-run"]) == 0
    assert "signature: NOT checked: the bundle is unsigned" in capsys.readouterr().out


def test_with_the_key_the_signature_is_checked_and_an_attacker_refused(hand_bundle, keys, capsys):
    sign_bundle(hand_bundle, keys["release"][0])
    assert main(["bundle", "verify", str(hand_bundle), "--no-run", "--key",
                 str(keys["release"][1])]) == 0
    assert "signature: ok: signed by a trusted key" in capsys.readouterr().out
    sign_bundle(hand_bundle, keys["attacker"][0])
    assert main(["bundle", "verify", str(hand_bundle), "--no-run", "--key",
                 str(keys["release"][1])]) == 2
    assert "error[bad-signature]" in capsys.readouterr().err
