"""tests/needs.py: a missing optional test dependency skips on a laptop and fails in CI.

Why test a test helper: every torch test (the FP16 catalogue, the bitwise ORT comparison, the
catalogue parity) leans on it to fail CI when the install lost torch; if it skipped there too,
those tests would go green without running.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.needs import optional

pytestmark = pytest.mark.unit

MISSING = "edgefuse_no_such_module_for_tests"


def test_a_missing_module_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    # pytest.raises(RuntimeError) would let a skip through and report this test as skipped.
    with pytest.raises(BaseException) as caught:
        optional(MISSING)
    assert caught.type is RuntimeError, f"under CI, optional() raised {caught.type.__name__}"
    assert re.search(rf"CI must install '{MISSING}'.*see \.ci/run", str(caught.value))


def test_a_missing_module_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=MISSING):
        optional(MISSING)


@pytest.mark.parametrize("ci", ["true", None], ids=["ci", "laptop"])
def test_a_present_module_is_returned(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert optional("json") is json
