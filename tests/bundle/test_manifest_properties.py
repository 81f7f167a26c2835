"""Bundle manifests as a stranger may leave them (a hand edit, a bad copy, a forged one with
its self-digest recomputed, as anyone can): ``verify_tree`` (what ``edgefuse bundle verify``
and the installer's checks run) accepts the bundle or refuses it with ``error[...]``; never a
traceback or exit 3. JSON-level mutations at any depth, and byte-level damage of the file."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgefuse.bundle.archive import ZEROS, manifest_self_digest
from edgefuse.bundle.bundle_check import verify_tree
from tests.properties.strangers import (
    PROPERTIES,
    assert_clean_exit,
    cli,
    flipped_bytes,
    mutated,
    outcome,
)

pytestmark = pytest.mark.ort


@pytest.fixture(scope="module")
def bundle(small_build, tmp_path_factory):
    """A copy of the small bundle, and its MANIFEST.json's text."""
    folder = tmp_path_factory.mktemp("manifest") / small_build.bundle.name
    shutil.copytree(small_build.bundle, folder)
    return folder, (folder / "MANIFEST.json").read_bytes()


def _with_digest(text: str) -> str:
    """``text`` with its claimed self-digest replaced by the one it has (a forger's step),
    where the claim can still be found."""
    try:
        claimed, _ = manifest_self_digest(text)
    except (ValueError, RecursionError):
        return text
    if claimed is None:
        return text
    blanked = text.replace(claimed, ZEROS, 1)
    return blanked.replace(ZEROS, hashlib.sha256(blanked.encode("utf-8")).hexdigest(), 1)


def _verified(folder, data: bytes) -> str:
    (folder / "MANIFEST.json").write_bytes(data)
    return outcome(lambda: verify_tree(folder))


def test_the_bundle_verifies(bundle):
    folder, original = bundle
    assert _verified(folder, original) == "ok"


@PROPERTIES
@given(data=mutated(json.loads(
    '{"bundle": {"id": "x", "version": "1"}, "files": {"a": "0"}, "app": {}}')))
def test_manifest_mutations_shaped_like_a_manifest_end_cleanly(bundle, data):
    folder, original = bundle
    base = json.loads(original)
    merged = {**base, **data} if isinstance(data, dict) else data
    text = json.dumps(merged, indent=2) + "\n"
    _verified(folder, _with_digest(text).encode("utf-8"))


@PROPERTIES
@given(data=st.data())
def test_any_mutation_of_the_real_manifest_ends_cleanly(bundle, data):
    folder, original = bundle
    changed = data.draw(mutated(json.loads(original)))
    text = json.dumps(changed, indent=2, allow_nan=True) + "\n"
    for candidate in (text, _with_digest(text)):
        _verified(folder, candidate.encode("utf-8"))


@PROPERTIES
@given(data=st.data())
def test_any_byte_damage_of_the_manifest_ends_cleanly(bundle, data):
    folder, original = bundle
    damaged = data.draw(flipped_bytes(original))
    _verified(folder, damaged)
    try:
        forged = _with_digest(damaged.decode("utf-8")).encode("utf-8")
    except UnicodeDecodeError:
        return
    _verified(folder, forged)


def test_a_mangled_manifest_exits_2_from_the_cli(small_build, tmp_path):
    folder = tmp_path / small_build.bundle.name
    shutil.copytree(small_build.bundle, folder)
    data = json.loads((folder / "MANIFEST.json").read_text())
    data["files"] = ["not", "a", "mapping"]
    text = json.dumps(data, indent=2) + "\n"
    (folder / "MANIFEST.json").write_text(_with_digest(text))
    done = cli("bundle", "verify", str(folder), "--no-run")
    assert_clean_exit(done)
    assert done.returncode == 2 and "error[" in done.stderr, done.stderr
