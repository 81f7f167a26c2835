"""The error-reference catalogue: unique, kebab-case, documented, and the only source of
references in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgefuse.errors import EdgefuseError, Ref, render_catalogue

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edgefuse"
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def test_every_reference_is_kebab_case_unique_and_explained():
    values = [ref.value for ref in Ref]
    assert len(values) == len(set(values))
    assert [v for v in values if not KEBAB.match(v)] == []
    assert [ref.name for ref in Ref if len(ref.meaning) < 10] == []
    assert [ref.name for ref in Ref if ref.name != ref.value.upper().replace("-", "_")] == []


def test_the_docs_list_exactly_the_catalogue():
    documented = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert documented == render_catalogue(), "write render_catalogue() to docs/errors.md"


def test_no_module_spells_a_reference_as_a_string_literal():
    literal = re.compile(r"""reference\s*=\s*f?["']""")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py")) if path.name != "errors.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert offenders == []


def test_every_reference_is_used_somewhere():
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    unused = [ref.name for ref in Ref if source.count(f"Ref.{ref.name}") == 0]
    assert unused == []


def test_an_error_takes_a_member_or_its_value_and_renders_the_value():
    by_member = EdgefuseError("broken", reference=Ref.BAD_FEEDS, hint="fix it")
    by_value = EdgefuseError("broken", reference="bad-feeds")
    assert by_member.reference == by_value.reference == "bad-feeds"
    assert by_member.render() == "error[bad-feeds]: broken\n  hint: fix it"
    with pytest.raises(ValueError, match="'no-such-thing' is not in edgefuse.errors.Ref"):
        EdgefuseError("broken", reference="no-such-thing")
