"""Suite-wide rules and the runtime fixtures: the pyACL stand-in and a clean fallback log.

The stand-in lives in tests/fakes, outside every package, and only these tests put that folder on
sys.path; the edgefuse package cannot reach it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[0] / "fakes"
if str(FAKES) not in sys.path:
    sys.path.insert(0, str(FAKES))

from acl_standin import AclStandIn  # noqa: E402

from edgefuse import runtime  # noqa: E402
from edgefuse.acl.resources import RUNTIME  # noqa: E402

KINDS = ("unit", "ort", "torch", "standin")


def pytest_collection_modifyitems(config, items):
    """Every test declares what it needs, so that ``-m`` can split the suite by it."""
    undeclared = [item.nodeid for item in items
                  if not any(item.get_closest_marker(kind) for kind in KINDS)]
    if undeclared:
        raise pytest.UsageError(
            f"{len(undeclared)} test(s) declare none of the markers {', '.join(KINDS)} "
            f"(add a module-level pytestmark): {', '.join(undeclared[:5])}")


@pytest.fixture
def standin(monkeypatch):
    """A fresh strict ``acl`` stand-in installed as the ``acl`` module (host run mode); one test
    is one process to it, so pyACL is finalized after the test as at interpreter exit."""
    fake = AclStandIn()
    monkeypatch.setitem(sys.modules, "acl", fake)
    yield fake
    assert RUNTIME.users == 0, "a test left an AclSession open"
    RUNTIME.shutdown()


@pytest.fixture
def no_acl(monkeypatch):
    """Make ``import acl`` fail, as on a laptop (a None entry in sys.modules blocks the import)."""
    monkeypatch.setitem(sys.modules, "acl", None)


@pytest.fixture(autouse=True)
def fresh_fallback_log(monkeypatch):
    """Each test sees open_session's once-per-process warnings afresh."""
    monkeypatch.setattr(runtime, "_warned", set())
