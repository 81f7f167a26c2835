"""Build specs as strangers write them: every mutation of the examples' specs, and any text,
loads or is refused with ``error[...]`` (exit 2) listing its problems."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from edgefuse.bundle.spec import load_spec
from tests.properties.strangers import PROPERTIES, assert_clean_exit, cli, mutated, outcome

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPECS = {path.name: yaml.safe_load(path.read_text(encoding="utf-8"))
         for path in sorted(EXAMPLES.glob("*.yaml"))}


def _checked(text: str) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.yaml"
        path.write_text(text, encoding="utf-8")
        return outcome(lambda: load_spec(path))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_example_specs_are_valid(name):
    assert _checked(yaml.safe_dump(SPECS[name])) == "ok"


@PROPERTIES
@given(st.sampled_from(sorted(SPECS)).flatmap(lambda name: mutated(SPECS[name])))
# found: an app kind that is a list (unhashable) reached a dict lookup: exit 3, not the list of
# the spec's problems
@example({**SPECS["tiny-camera.yaml"], "app": {**SPECS["tiny-camera.yaml"]["app"], "kind": []}})
def test_any_mutation_of_a_spec_loads_or_is_refused_clearly(data):
    _checked(yaml.safe_dump(data, allow_unicode=True))


@PROPERTIES
@given(st.text(max_size=300))
@example("apiVersion: edgefuse/v1\nmodels: {")
@example("- - - a")
def test_any_text_as_a_spec_loads_or_is_refused_clearly(text):
    _checked(text)


def test_a_mangled_spec_exits_2_from_the_cli_before_building(tmp_path):
    spec = {**SPECS["tiny-camera.yaml"], "models": [{"name": 3, "source": ["x"]}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    done = cli("build", str(path), "-o", str(tmp_path / "out"), "--no-progress")
    assert_clean_exit(done)
    assert done.returncode == 2 and "error[bad-build-spec]" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
